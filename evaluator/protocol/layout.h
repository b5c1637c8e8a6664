// Where everything lives in one rank's arena: byte offsets that are identical
// on every rank (so a peer's tensor is at the same offset in its arena), and
// that the harness worker and the candidate worker compute alike from the
// problem alone.
//
// Two arenas per rank, both allocated by the trusted harness worker:
// - the private arena: the pristine inputs and the baseline's outputs (the
//   expected values), never mapped into a candidate process;
// - the candidate arena: the inputs the candidate reads, the outputs it
//   writes, its workspace, signal pad and the staging area of its collectives.
//   Split (`readonly_bytes` > 0), its inputs that are not also outputs come
//   first, every set's, within [0, readonly_bytes): the part candidate
//   processes map read-only. Everything else starts at readonly_bytes.
#pragma once

#include <cstddef>
#include <vector>

#include "kforge/evaluator/task.h"

namespace kforge::eval::proto {

inline constexpr size_t kArenaAlign = 256;
inline constexpr size_t kSignalPadBytes = size_t{1} << 16;

struct ArenaLayout {
  int sets = 1;
  std::vector<std::vector<size_t>> input_off;     // [set][input]
  std::vector<std::vector<size_t>> output_off;    // [set][output]: every Problem::outputs entry;
                                                  // an inout entry aliases its input
  std::vector<std::vector<size_t>> pristine_off;  // [set][input]: an untouched copy of an
                                                  // inout input (else == input_off)
  size_t workspace_off = 0, workspace_bytes = 0;
  size_t pad_off = 0, pad_bytes = 0;
  size_t staging_off = 0, staging_bytes = 0;
  size_t readonly_bytes = 0;  // the read-only part (0: none)
  size_t readonly_used = 0;   // the end of the inputs placed in it (<= readonly_bytes)
  size_t total = 0;
};

// `staging`: room for the emulated collectives; `pristine`: copies of inout
// inputs (the private arena keeps them to restore inout tensors before calls);
// `readonly_bytes`: a split arena's read-only part (at least ReadOnlyInputBytes).
ArenaLayout ComputeLayout(const Problem& p, int sets, bool staging, bool pristine,
                          size_t readonly_bytes = 0);

// The bytes a split candidate arena's read-only part needs for `sets` sets of
// p's inputs that are not also outputs (0 when it has none).
size_t ReadOnlyInputBytes(const Problem& p, int sets);

}  // namespace kforge::eval::proto
