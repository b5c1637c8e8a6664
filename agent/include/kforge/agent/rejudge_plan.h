// `kforge run --rejudge RUN`, planned: the stored run read, this machine's
// evaluators made, the new run's store created (agent/rejudge.h runs it).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kforge/agent/rejudge.h"
#include "kforge/agent/run_config.h"
#include "kforge/agent/run_plan.h"
#include "kforge/core/status.h"

namespace kforge::agent {

// A rejudge, planned: the original run read, this machine's evaluators made,
// the new run's store created (as for PlanRun, nothing is created before
// everything is checked).
struct RejudgePlan {
  RunConfig config;  // stored with the new run: the original's, renamed, rejudge_of set
  std::filesystem::path run_dir, source_dir, tasks_dir;
  std::vector<eval::Task> tasks;  // before pools: the evaluators point into it
  std::unique_ptr<EvalPools> pools;
  std::unique_ptr<StorePort> store;
  RejudgeSpec spec;
  std::vector<std::string> notices;  // for the user before the rejudge starts

  RejudgePlan() = default;
  RejudgePlan(const RejudgePlan&) = delete;
  RejudgePlan& operator=(const RejudgePlan&) = delete;
  // The ports of the plan (no model); the caller adds clock, executor and progress.
  RunDeps Deps() const;
};

// `source`: the run to judge again, a run name under here.out, a run
// directory, or DIR:NAME for one run of a store holding several (results
// merge/import). `here`: this invocation: the new run's name (empty:
// SOURCE-rejudge-N, the first N free) and out, where and how it evaluates
// (gpus, compile_jobs, compile_only, baseline_reuse_s, tasks_dir, evaluators,
// slurm), and, when given, tasks (selectors) and models (specs) that keep only
// the original's sessions they match. With env.resume, `source` names a
// rejudge run under here.out to continue. Errors name the run, the model or
// the task that is missing.
Result<std::unique_ptr<RejudgePlan>> PlanRejudge(const std::string& source, const RunConfig& here,
                                                 const PlanEnv& env);

}  // namespace kforge::agent
