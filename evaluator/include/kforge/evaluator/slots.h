// How one machine is divided into evaluation slots: its GPUs into sets of one
// evaluation each, its CPUs between the timed evaluations and everything else
// (compiles, model calls). While a kernel is timed its ranks must not wait for
// the scheduler: emulated ranks spin on each other's flags, so one delayed rank
// inflates every rank's time (docs/agent.md, "Pools"). `kforge run` and
// `kforge eval-server` cut a machine by these rules alike.
#pragma once

#include <vector>

namespace kforge::eval {

// `gpus` cut into consecutive sets of `world` (what is left over stays idle);
// fewer GPUs than `world`: one set of all of them (ranks share GPUs, emulated).
// No GPUs: no set.
std::vector<std::vector<int>> CutGpuSets(const std::vector<int>& gpus, int world);

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

}  // namespace kforge::eval
