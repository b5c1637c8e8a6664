// A machine cut into evaluation slots (kforge/evaluator/slots.h).
#include "kforge/evaluator/slots.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <thread>

namespace kforge::eval {

std::vector<int> AllowedCpus() {
  std::vector<int> out;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) out.push_back(c);
    }
  }
  if (out.empty()) {
    for (unsigned c = 0; c < std::max(1u, std::thread::hardware_concurrency()); ++c)
      out.push_back(static_cast<int>(c));
  }
  return out;
}

std::vector<std::vector<int>> CutGpuSets(const std::vector<int>& gpus, int world) {
  std::vector<std::vector<int>> sets;
  if (gpus.empty()) return sets;
  const size_t w = static_cast<size_t>(std::max(1, world));
  if (gpus.size() < w) return {gpus};
  for (size_t s = 0; s + w <= gpus.size(); s += w)
    sets.emplace_back(gpus.begin() + static_cast<long>(s), gpus.begin() + static_cast<long>(s + w));
  return sets;
}

CpuSplit SplitCpus(int world, int gpu_sets, const std::vector<int>& allowed) {
  CpuSplit s;
  const size_t timing =
      gpu_sets > 0 ? static_cast<size_t>(3 * std::max(1, world) * gpu_sets + 2) : 0;
  s.compile_slots =
      static_cast<int>(std::max<size_t>(1, allowed.size() - std::min(timing, allowed.size())));
  if (gpu_sets <= 0 || allowed.size() < timing + 2) return s;
  s.gpu.assign(allowed.begin(), allowed.begin() + static_cast<long>(timing));
  s.compile.assign(allowed.begin() + static_cast<long>(timing), allowed.end());
  return s;
}

void PinThisThread(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  }
  (void)pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

}  // namespace kforge::eval
