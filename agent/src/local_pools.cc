// This machine's evaluators for a run (run_plan.h).
#include <algorithm>

#include "kforge/agent/adapters.h"
#include "kforge/agent/cpus.h"
#include "kforge/agent/run_plan.h"

namespace kforge::agent {

Result<std::unique_ptr<EvalPools>> LocalEvalPools(const RunConfig& cfg,
                                                  const std::vector<eval::Task>* tasks) {
  auto p = std::make_unique<EvalPools>();
  p->compile_only = cfg.compile_only;
  p->no_gpu_reason = "--compile-only";
  p->where = "this machine";
  if (!p->compile_only) {
    auto card = eval::ProbeHardware(cfg.gpus);
    if (card.ok()) {
      p->card = *card;
    } else {
      p->compile_only = true;
      p->no_gpu_reason = card.status().message();
    }
  }
  std::vector<int> gpus = cfg.gpus;
  if (gpus.empty() && p->card) gpus = p->card->DeviceIndices();
  if (!p->compile_only) {
    const size_t world = static_cast<size_t>(std::max(1, cfg.world));
    const size_t sets = std::max<size_t>(1, gpus.size() / world);
    for (size_t s = 0; s < sets; ++s) {
      std::vector<int> set = gpus;
      if (gpus.size() >= world)
        set.assign(gpus.begin() + s * world, gpus.begin() + (s + 1) * world);
      p->owned.push_back(MakeEvaluatorPort(tasks, set, cfg.baseline_reuse_s));
      p->gpu.push_back(p->owned.back().get());
    }
  }
  // Cores for the evaluations, the rest for compiles (agent/cpus.h); compiles
  // also run at a lower priority.
  const CpuSplit split =
      SplitCpus(cfg.world, p->compile_only ? 0 : static_cast<int>(p->gpu.size()));
  p->gpu_cpus = split.gpu;
  p->compile_cpus = split.compile;
  int compile_jobs = cfg.compile_jobs > 0 ? cfg.compile_jobs : split.compile_slots;
  for (int i = 0; i < compile_jobs; ++i) {
    p->owned.push_back(MakeEvaluatorPort(tasks, {}));
    p->compile.push_back(p->owned.back().get());
  }
  return p;
}

}  // namespace kforge::agent
