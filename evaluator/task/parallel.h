// A minimal parallel-for over an index range for host-side data work
// (input generation, conversions). Internal to the task model.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace kforge::eval::internal {

// Threads to use for `n` items: `requested` if > 0, else the hardware's, and
// never more than one per `min_per_thread` items.
inline int ThreadsFor(int64_t n, int requested, int64_t min_per_thread = 1 << 16) {
  int t = requested > 0 ? requested
                        : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t cap = std::max<int64_t>(1, n / min_per_thread);
  return static_cast<int>(std::min<int64_t>(t, cap));
}

// Calls fn(begin, end) on contiguous chunks covering [0, n), in `threads`
// threads. Chunk bounds are multiples of `align`, so callers that produce
// items in pairs can keep pairs in one chunk.
template <typename Fn>
void ParallelFor(int64_t n, int threads, Fn&& fn, int64_t align = 1) {
  if (n <= 0) return;
  if (threads <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  int64_t chunk = (n + threads - 1) / threads;
  chunk = (chunk + align - 1) / align * align;
  std::vector<std::thread> pool;
  for (int64_t begin = chunk; begin < n; begin += chunk) {
    pool.emplace_back([&fn, begin, end = std::min(n, begin + chunk)] { fn(begin, end); });
  }
  fn(int64_t{0}, std::min(n, chunk));
  for (auto& t : pool) t.join();
}

}  // namespace kforge::eval::internal
