// Which CPUs the GPU evaluations of this machine get, and which the compiles
// and model calls: while a kernel is timed its ranks must not wait for the
// scheduler (emulated ranks spin on each other's flags, so one delayed rank
// inflates every rank's time; docs/agent.md, "Pools").
#pragma once

#include <vector>

namespace kforge::agent {

struct CpuSplit {
  std::vector<int> gpu, compile;  // both empty: no split (too few CPUs)
  int compile_slots = 1;          // compiles at once by default: the CPUs the evaluations leave
};

// The CPUs this process may run on (a cgroup's or Slurm allocation's, not the
// machine's).
std::vector<int> AllowedCpus();

// 3 CPUs per rank of each GPU set (harness, candidate, reference) and 2 for
// the coordinator and the MPS daemon go to the GPU evaluations, the rest to
// the others, when at least 2 are left; otherwise no split. No GPU set: all
// CPUs are compile slots.
CpuSplit SplitCpus(int world, int gpu_sets, const std::vector<int>& allowed = AllowedCpus());

// Pins the calling thread, and every process it starts from now on (a child
// inherits its thread's mask), to `cpus`; empty: leaves it as it is.
void PinThisThread(const std::vector<int>& cpus);

}  // namespace kforge::agent
