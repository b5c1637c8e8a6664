// `kforge run`, planned: a checked run config resolved into what ExecuteRun
// needs (the tasks, the strategy, the model clients, the evaluators, the
// store, each task's first prompt). Every decision of a run is made here; the
// CLI parses flags into a RunConfig, calls PlanRun, prints, and executes.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kforge/agent/ports.h"
#include "kforge/agent/run_config.h"
#include "kforge/agent/runner.h"
#include "kforge/agent/strategy.h"
#include "kforge/core/status.h"
#include "kforge/evaluator/hardware.h"
#include "kforge/evaluator/task.h"

namespace kforge::agent {

// The evaluators of a run: one port per GPU set and per compile slot, local
// or remote (slots of one server share a group and are lost together).
struct EvalPools {
  std::vector<std::unique_ptr<EvalPort>> owned;
  std::vector<EvalPort*> gpu, compile;
  std::vector<std::string> gpu_names, compile_names;
  std::vector<std::string> gpu_groups, compile_groups;
  bool compile_only = false;
  std::string no_gpu_reason;               // why compile_only, when it was not asked for
  std::optional<eval::HardwareCard> card;  // the probed (or a server's) card; none without a GPU
  bool remote = false;
  std::string where;  // "this machine" or "3 eval-server(s): ..."
  // CPUs the jobs of each pool run on (threads pinned, children inherit it):
  // local GPU evaluations get cores no compile can take, so that timed calls
  // are never delayed by the scheduler. Empty: any.
  std::vector<int> gpu_cpus, compile_cpus;
  // Runs when the run is over (e.g. stopping the servers started for it).
  std::function<void()> release;
  EvalPools() = default;
  EvalPools(const EvalPools&) = delete;
  EvalPools& operator=(const EvalPools&) = delete;
  ~EvalPools() {
    if (release) release();
  }
};

// This machine's evaluators: the probed card (none found means
// compile-only), one evaluator per disjoint set of `world` GPUs (all GPUs in
// one emulated set when there are fewer), and cfg.compile_jobs compile slots
// (0: one per CPU core). `tasks` must outlive the pools.
Result<std::unique_ptr<EvalPools>> LocalEvalPools(const RunConfig& cfg,
                                                  const std::vector<eval::Task>* tasks);

// The evaluators when they are not this machine's (eval-servers, Slurm): the
// pools, or nullptr for "use LocalEvalPools".
using RemotePoolsFn = std::function<Result<std::unique_ptr<EvalPools>>(
    const RunConfig& cfg, const std::string& suite_hash, const std::filesystem::path& run_dir)>;

struct PlanEnv {
  std::filesystem::path prompts_dir;  // empty: DefaultPromptsDir()
  bool resume = false;                // continuing the stored run of cfg.name
  bool default_name = false;          // cfg.name was made up: a clash picks another
  RemotePoolsFn remote_pools;         // empty: local evaluators only
  std::filesystem::path record;       // a cassette to append every model exchange to
  bool use_cache = true;              // false: the response cache is neither read nor written
};

struct RunPlan {
  RunConfig config;  // as resolved (a made-up name may have changed)
  std::filesystem::path run_dir, tasks_dir;
  std::vector<eval::Task> tasks;  // before pools: the evaluators point into it
  Strategy strategy;              // spec.strategy points here
  std::unique_ptr<LlmPort> llm;
  std::unique_ptr<EvalPools> pools;
  std::unique_ptr<StorePort> store;
  RunSpec spec;
  std::vector<std::string> notices;  // for the user before the run starts

  RunPlan() = default;
  RunPlan(const RunPlan&) = delete;
  RunPlan& operator=(const RunPlan&) = delete;
  // The ports of the plan; the caller adds clock, executor and progress.
  RunDeps Deps() const;
};

// The config stored with run `name` under `out` (for --resume), or kNotFound.
Result<RunConfig> StoredRunConfig(const std::filesystem::path& out, const std::string& name);

// Everything is checked before anything is stored or spent: the tasks and
// selectors (each selected task instantiates at cfg.world and cfg.dtype), the
// strategy, every model's provider, the name (a new run may not reuse a
// stored one, unless it was made up: then it gets a suffix), the hardware
// card (a named profile, else the evaluators'), every prompt.
Result<std::unique_ptr<RunPlan>> PlanRun(RunConfig cfg, const PlanEnv& env);

}  // namespace kforge::agent
