// Deterministic inputs and the oracle's view of a problem.
//
// Every input value is a pure function of (trial seed, rank, input index,
// element index) — rank is taken as 0 for same_on_all_ranks inputs — so the
// coordinator and every worker produce identical bytes without talking, and
// the result does not depend on how many threads generate it.
#pragma once

#include <cstdint>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/evaluator/task.h"
#include "kforge/oracle.h"
#include "task/input_gen.h"

namespace kforge::eval {

// Fills dst (p.inputs[input_index].nbytes bytes of host memory) with rank's
// values of that input. `threads` 0: use the hardware's threads.
// Fails for a custom input whose task registered no generator, or for a
// permutation that the dtype cannot hold exactly.
Status GenerateInput(const Problem& p, int input_index, int rank, uint64_t trial_seed, void* dst,
                     int threads = 0);

// The generator of rank's values of input `input_index` (not for custom
// inputs): the same InputGen the harness worker runs on the GPU.
Result<gen::InputGen> MakeInputGen(const Problem& p, int input_index, int rank,
                                   uint64_t trial_seed);

// Raw bytes of every rank's inputs: [rank][input index].
using HostInputs = std::vector<std::vector<std::vector<uint8_t>>>;
Result<HostInputs> GenerateAllInputs(const Problem& p, uint64_t trial_seed, int threads = 0);
// The same into `all`, reusing its buffers: the trials of one size allocate
// (and fault in) their memory once.
Status GenerateAllInputsInto(const Problem& p, uint64_t trial_seed, HostInputs* all,
                             int threads = 0);

// The oracle's view: all ranks' inputs as doubles (from inputs_by_rank[rank]
// [input], raw bytes of each input's dtype), params = p.vars, and outputs
// pre-sized and filled with NaN (so unwritten values stand out). When
// inputs_by_rank is empty the inputs are generated from `trial_seed`.
Result<OracleIo> BuildOracleIo(const Problem& p, uint64_t trial_seed,
                               const std::vector<std::vector<const void*>>& inputs_by_rank);
// The same into `io` from given inputs, reusing its buffers (every element
// is written again: the inputs decoded, the outputs NaN).
Status BuildOracleIoInto(const Problem& p,
                         const std::vector<std::vector<const void*>>& inputs_by_rank, OracleIo* io);

// Runs the oracle registered under the task's name. Fails when none is
// registered, when it returns an error or throws, or when it resizes outputs.
Status RunOracle(const Problem& p, OracleIo& io);

}  // namespace kforge::eval
