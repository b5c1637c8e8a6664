// This machine's evaluators for a run (run_plan.h).
#include "kforge/agent/run_plan.h"
#include "kforge/evaluator/service.h"
#include "kforge/evaluator/slots.h"

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
  if (!p->compile_only) {
    std::vector<int> gpus = cfg.gpus;
    if (gpus.empty() && p->card) gpus = p->card->DeviceIndices();
    std::vector<std::vector<int>> sets = eval::CutGpuSets(gpus, cfg.world);
    if (sets.empty()) sets.emplace_back();  // the evaluator's default GPUs
    for (auto& set : sets) {
      p->owned.push_back(eval::MakeLocalEvalService(tasks, std::move(set), cfg.baseline_reuse_s,
                                                    !cfg.no_warm_groups));
      p->gpu.push_back(p->owned.back().get());
    }
  }
  // Cores for the evaluations, the rest for compiles (kforge/evaluator/slots.h);
  // compiles also run at a lower priority.
  const eval::CpuSplit split =
      eval::SplitCpus(cfg.world, p->compile_only ? 0 : static_cast<int>(p->gpu.size()));
  p->gpu_cpus = split.gpu;
  p->compile_cpus = split.compile;
  int compile_jobs = cfg.compile_jobs > 0 ? cfg.compile_jobs : split.compile_slots;
  for (int i = 0; i < compile_jobs; ++i) {
    p->owned.push_back(eval::MakeLocalEvalService(tasks, {}));
    p->compile.push_back(p->owned.back().get());
  }
  return p;
}

}  // namespace kforge::agent
