#include "protocol/layout.h"

#include <algorithm>

namespace kforge::eval::proto {
namespace {

size_t AlignUp(size_t x) { return (x + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

}  // namespace

size_t ReadOnlyInputBytes(const Problem& p, int sets) {
  size_t per_set = 0;
  for (const auto& t : p.inputs) {
    if (!t.inout) per_set += AlignUp(std::max<size_t>(t.nbytes, 1));
  }
  return per_set * static_cast<size_t>(std::max(1, sets));
}

ArenaLayout ComputeLayout(const Problem& p, int sets, bool staging, bool pristine,
                          size_t readonly_bytes) {
  ArenaLayout l;
  l.sets = std::max(1, sets);
  l.readonly_bytes = readonly_bytes;
  size_t off = 0, largest = 0;
  auto take = [&](size_t bytes) {
    size_t at = off;
    off += AlignUp(std::max<size_t>(bytes, 1));
    largest = std::max(largest, bytes);
    return at;
  };
  l.input_off.assign(l.sets, {});
  l.output_off.assign(l.sets, {});
  l.pristine_off.assign(l.sets, {});
  if (readonly_bytes > 0) {
    // Split: the read-only inputs of every set first; the rest after the part.
    for (int s = 0; s < l.sets; ++s) {
      for (const auto& t : p.inputs) l.input_off[s].push_back(t.inout ? 0 : take(t.nbytes));
    }
    l.readonly_used = off;
    off = std::max(off, readonly_bytes);
  }
  for (int s = 0; s < l.sets; ++s) {
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      if (readonly_bytes == 0) {
        l.input_off[s].push_back(take(p.inputs[i].nbytes));
      } else if (p.inputs[i].inout) {
        l.input_off[s][i] = take(p.inputs[i].nbytes);
      }
    }
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      l.pristine_off[s].push_back(pristine && p.inputs[i].inout ? take(p.inputs[i].nbytes)
                                                                : l.input_off[s][i]);
    }
    for (const auto& t : p.outputs) {
      l.output_off[s].push_back(t.inout_of >= 0 ? l.input_off[s][static_cast<size_t>(t.inout_of)]
                                                : take(t.nbytes));
    }
  }
  const size_t largest_tensor = largest;
  l.workspace_bytes = AlignUp(std::max<size_t>(p.workspace_bytes, 1));
  l.workspace_off = take(l.workspace_bytes);
  l.pad_bytes = kSignalPadBytes;
  l.pad_off = take(l.pad_bytes);
  // A harness collective's buffer is a tensor or lies in the workspace (a
  // reference reducing a partial product or a Gram matrix it computed there).
  const size_t largest_buffer = std::max(largest_tensor, l.workspace_bytes);
  l.staging_bytes = staging ? AlignUp(2 * largest_buffer + (size_t{1} << 20)) : 0;
  l.staging_off = off;
  off += l.staging_bytes;
  l.total = off;
  return l;
}

}  // namespace kforge::eval::proto
