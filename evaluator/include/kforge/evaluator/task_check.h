// `kforge tasks validate` beyond parsing: run the task's oracle on generated
// inputs at every check size, world size and dtype.
#pragma once

#include <cstdint>

#include "kforge/core/status.h"
#include "kforge/evaluator/task.h"

namespace kforge::eval {

struct OracleCheckStats {
  int problems = 0;           // (W, dtype, check size) combinations run
  int skipped = 0;            // combinations over max_elements
  int64_t output_values = 0;  // oracle outputs checked for finiteness
};

// Instantiates every check size at every W and dtype, generates every rank's
// inputs from `seed`, runs the oracle and requires every checked output value
// (all ranks, or only_rank) to be finite. Fails at the first problem, naming
// it. Needs the task's oracle (and generator, for custom inputs) registered.
// max_elements > 0 skips problems whose elements over all ranks' tensors
// exceed it (quick checks); 0 runs everything.
Result<OracleCheckStats> CheckOracle(const Task& task, uint64_t seed, int64_t max_elements = 0);

}  // namespace kforge::eval
