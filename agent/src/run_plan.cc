#include "kforge/agent/run_plan.h"

#include <fmt/format.h>

#include <cstdlib>
#include <ctime>

#include "breach.h"
#include "kforge/agent/adapters.h"
#include "kforge/agent/hardware_card.h"
#include "kforge/agent/prompt.h"
#include "kforge/core/fs.h"
#include "kforge/evaluator/suite_hash.h"
#include "kforge/evaluator/task_select.h"
#include "kforge/results/store.h"

namespace kforge::agent {
namespace {

namespace fs = std::filesystem;

// A made-up name's n-th choice: "run-DATE-TIME", then "run-DATE-TIME-2", ...
std::string MadeUpName(const std::string& base, int choice) {
  return choice == 1 ? base : fmt::format("{}-{}", base, choice);
}
constexpr int kMaxNameChoices = 1000;

// A run name already in use is refused unless resuming (a silent merge would
// mix two configs under one stored config); a made-up name takes the next
// free suffix. This early check names what differs; ClaimRunDir is what keeps
// two runs starting at once out of one directory.
Status CheckRunName(RunConfig& cfg, bool default_name) {
  const std::string base = cfg.name;
  for (int choice = 1; choice <= kMaxNameChoices; ++choice) {
    if (default_name) cfg.name = MadeUpName(base, choice);
    const fs::path dir = fs::path(cfg.out) / cfg.name;
    if (!fs::exists(results::StorePath(dir))) return Status::Ok();
    if (default_name) continue;
    KF_ASSIGN_OR_RETURN(auto store, results::RunStore::Open(dir, true));
    KF_ASSIGN_OR_RETURN(auto runs, store->ListRuns());
    const results::RunInfo* same = nullptr;
    std::vector<std::string> names;
    for (const auto& r : runs) {
      if (r.name == cfg.name) same = &r;
      names.push_back(r.name);
    }
    if (!same) {
      // Another run's store (merged or imported), or one being created right
      // now: a new run never joins it.
      return Error(
          ErrorKind::kInvalidInput,
          fmt::format("{} already holds a run store ({}); pick another --name", dir.string(),
                      names.empty() ? "no run in it yet"
                                    : fmt::format("runs: {}", fmt::join(names, ", "))));
    }
    auto stored = RunConfigFromJson(same->config);
    std::vector<std::string> diff;
    if (stored.ok()) diff = RunConfigDifferences(*stored, cfg);
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("run '{}' already exists in {}{}{}; continue it with `kforge run "
                             "--resume {} --out {}`, or pick another --name",
                             cfg.name, dir.string(), diff.empty() ? "" : ", and this asks: ",
                             fmt::join(diff, "; "), cfg.name, cfg.out));
  }
  return Error(ErrorKind::kInvalidInput, fmt::format("{}: {} runs named {}-N already; pass --name",
                                                     cfg.out, kMaxNameChoices, base));
}

// Creates the run's store with RunStore::Create, which only one creator of a
// directory wins: of two runs that passed CheckRunName at the same time under
// one name, the second is refused or, when its name was made up, takes the
// next free suffix (nothing else in the plan depends on the name yet, except
// a Slurm rendezvous made under the first choice).
Status ClaimRunDir(RunPlan& plan, const std::string& base, bool default_name) {
  RunConfig& cfg = plan.config;
  for (int choice = 1; choice <= kMaxNameChoices; ++choice) {
    if (default_name) {
      const std::string name = MadeUpName(base, choice);
      if (name != cfg.name && fs::exists(results::StorePath(fs::path(cfg.out) / name))) continue;
      cfg.name = name;
    }
    const fs::path dir = fs::path(cfg.out) / cfg.name;
    auto store = CreateRunStore(dir);
    if (store.ok()) {
      plan.store = std::move(*store);
      plan.run_dir = dir;
      plan.spec.name = cfg.name;
      plan.spec.config["name"] = cfg.name;
      return Status::Ok();
    }
    if (store.status().kind() != ErrorKind::kInvalidInput) return store.status();
    if (!default_name) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("run '{}' was created in {} by another kforge run starting at the "
                               "same time; pick another --name",
                               cfg.name, dir.string()));
    }
  }
  return Error(ErrorKind::kInvalidInput, fmt::format("{}: {} runs named {}-N already; pass --name",
                                                     cfg.out, kMaxNameChoices, base));
}

// The selected tasks' keys; each must instantiate at the run's world and dtype.
Result<std::vector<std::string>> SelectedTasks(const RunPlan& plan) {
  std::vector<eval::TaskRef> suite;
  for (const auto& t : plan.tasks) suite.push_back(eval::RefFor(t));
  KF_ASSIGN_OR_RETURN(auto keys, eval::SelectTasks(plan.config.tasks, suite));
  for (const auto& key : keys) {
    KF_RETURN_IF_ERROR(eval::CheckTaskProblem(*eval::FindTask(plan.tasks, key), plan.config.world,
                                              plan.config.dtype));
  }
  return keys;
}

// The card the prompts show and the run stores: a named profile (trimmed to
// the run's world), else the evaluators' probed card, else none.
Result<std::optional<eval::HardwareCard>> PromptCard(const RunPlan& plan, const fs::path& prompts) {
  if (plan.config.hardware.empty()) return plan.pools->card;
  KF_ASSIGN_OR_RETURN(eval::HardwareCard card, FindHardwareProfile(plan.config.hardware, prompts));
  return std::optional<eval::HardwareCard>(card.Trimmed(plan.config.world));
}

// The spec's fields that come straight from the config and the pools.
void FillSpec(RunPlan& plan, const std::optional<eval::HardwareCard>& card,
              const std::string& suite_hash) {
  const RunConfig& cfg = plan.config;
  RunSpec& spec = plan.spec;
  spec.name = cfg.name;
  spec.models = cfg.models;
  spec.strategy = &plan.strategy;
  spec.repeats = cfg.repeats;
  spec.world = cfg.world;
  spec.dtype = cfg.dtype;
  spec.compile_only = plan.pools->compile_only;
  spec.profile = cfg.profile;
  spec.timing_cap_s = cfg.timing_cap_s;
  spec.budgets = cfg.budgets;
  spec.deadline_unix = cfg.deadline_unix;
  spec.config = RunConfigToJson(cfg);
  // The store takes the typed field; the config keeps its copy, as stored runs have it.
  spec.config["task_suite_hash"] = suite_hash;
  spec.task_suite_hash = suite_hash;
  spec.hardware = card ? eval::ToJson(*card) : nlohmann::json::object();
  spec.link_peak_gbps = card ? card->LinkPeakGbps() : 0;
  spec.pools.gpu_sets = static_cast<int>(plan.pools->gpu.size());
  spec.pools.compile_slots = static_cast<int>(plan.pools->compile.size());
  spec.pools.llm_per_model = cfg.llm_concurrency;
  spec.pools.llm_total = cfg.llm_concurrency * static_cast<int>(cfg.models.size());
}

// Each task's first prompt, and what the run resolved the config to
// (defaults filled in) for readers of the store. `compile_only` in the config
// stays what was asked, so that a resume on a GPU machine evaluates.
Status AddTasks(RunPlan& plan, const std::vector<std::string>& keys, const std::string& hw_md) {
  const RunConfig& cfg = plan.config;
  nlohmann::json resolved = {{"compile_only", plan.pools->compile_only},
                             {"world", cfg.world},
                             {"strategy", plan.strategy.name},
                             {"turns", plan.strategy.turns},
                             {"samples", plan.strategy.samples},
                             {"tasks_dir", plan.tasks_dir.string()},
                             {"tasks", keys},
                             {"dtypes", nlohmann::json::object()}};
  for (const auto& key : keys) {
    const eval::Task* t = eval::FindTask(plan.tasks, key);
    KF_ASSIGN_OR_RETURN(PromptInputs in,
                        TaskPromptInputs(*t, cfg.world, cfg.dtype, plan.strategy, hw_md));
    KF_ASSIGN_OR_RETURN(Prompt prompt, BuildPrompt(plan.strategy, in));
    plan.spec.tasks.push_back({t->key, t->category, prompt, in.dtype});
    resolved["dtypes"][t->key] = in.dtype;
  }
  plan.spec.config["resolved"] = resolved;
  return Status::Ok();
}

// A path as this process sees it, absolute (unchanged when empty).
std::string Absolute(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec);
  return ec ? path : abs.lexically_normal().string();
}

// The paths a new run stores, absolute: `kforge run --resume` from another
// working directory must find the same tasks, strategy file, registries and
// evaluators (the tasks folder is stored as found, default included).
void AbsolutePaths(RunConfig& c) {
  c.out = Absolute(c.out);
  c.tasks_dir = Absolute(eval::TasksDir(c.tasks_dir).string());
  if (c.strategy.find('/') != std::string::npos || c.strategy.ends_with(".toml"))
    c.strategy = Absolute(c.strategy);
  for (auto& r : c.registries) r = Absolute(r);
  c.evaluators_dir = Absolute(c.evaluators_dir);
  c.eval_token_file = Absolute(c.eval_token_file);
}

}  // namespace

Result<RunConfig> StoredRunConfig(const fs::path& out, const std::string& name) {
  fs::path dir = out / name;
  if (!fs::exists(results::StorePath(dir))) {
    return Error(ErrorKind::kNotFound, fmt::format("no run '{}' under {}", name, out.string()));
  }
  // Writable: resuming writes anyway, and an older schema is migrated here.
  KF_ASSIGN_OR_RETURN(auto store, results::RunStore::Open(dir, false));
  KF_ASSIGN_OR_RETURN(auto runs, store->ListRuns());
  for (const auto& r : runs) {
    if (r.name == name) return RunConfigFromJson(r.config);
  }
  return Error(ErrorKind::kNotFound, fmt::format("no run '{}' in {}", name, dir.string()));
}

Result<std::unique_ptr<RunPlan>> PlanRun(RunConfig cfg, const PlanEnv& env) {
  const std::string asked_name = cfg.name;
  if (!env.resume) {
    KF_RETURN_IF_ERROR(CheckRunName(cfg, env.default_name));
    AbsolutePaths(cfg);
  }
  auto plan = std::make_unique<RunPlan>();
  plan->config = std::move(cfg);
  const RunConfig& c = plan->config;
  plan->run_dir = fs::path(c.out) / c.name;
  plan->tasks_dir = eval::TasksDir(c.tasks_dir);
  KF_ASSIGN_OR_RETURN(plan->tasks, eval::LoadCheckedTasks(plan->tasks_dir));
  KF_ASSIGN_OR_RETURN(std::vector<std::string> keys, SelectedTasks(*plan));
  const fs::path prompts = env.prompts_dir.empty() ? DefaultPromptsDir() : env.prompts_dir;
  KF_ASSIGN_OR_RETURN(plan->strategy, FindStrategy(c.strategy, prompts));
  if (c.turns) plan->strategy.turns = *c.turns;
  if (c.samples) plan->strategy.samples = *c.samples;
  // A red-team run's canary (breach.h), planted in the run's directory and
  // handed to every evaluation (EvalJob::canary), which plants it inside
  // itself (docs/integrity.md, "kforge red-teams kforge").
  if (plan->strategy.redteam) plan->spec.canary = ChooseCanary(plan->run_dir, env.resume);
  // Every model must be callable before anything is stored or spent.
  KF_ASSIGN_OR_RETURN(plan->llm,
                      MakeProviderLlmFor(c.models, c.registries, env.record, env.use_cache));
  KF_ASSIGN_OR_RETURN(std::string suite_hash, eval::TaskSuiteHash(plan->tasks_dir));
  if (env.remote_pools) {
    KF_ASSIGN_OR_RETURN(plan->pools, env.remote_pools(c, suite_hash, plan->run_dir));
  }
  if (!plan->pools) {
    KF_ASSIGN_OR_RETURN(plan->pools, LocalEvalPools(c, &plan->tasks));
  }
  if (plan->pools->compile_only) {
    plan->notices.push_back(fmt::format(
        "no GPU evaluation ({}). Kernels will be compiled and policy-checked only; evaluation "
        "needs a GPU.",
        plan->pools->no_gpu_reason));
  }
  // A deadline already past stops the run before its first call: said, not
  // silent (a resume with a later --deadline continues it).
  if (const double now = static_cast<double>(std::time(nullptr));
      c.deadline_unix && *c.deadline_unix <= now) {
    plan->notices.push_back(fmt::format(
        "the deadline is already past ({:.0f} s ago): no model will be called; continue later "
        "with `kforge run --resume {} --deadline ...`",
        now - *c.deadline_unix, c.name));
  }
  KF_ASSIGN_OR_RETURN(std::optional<eval::HardwareCard> card, PromptCard(*plan, prompts));
  const std::string hw_md = card ? RenderHardwareCard(*card) : "";
  FillSpec(*plan, card, suite_hash);
  KF_RETURN_IF_ERROR(AddTasks(*plan, keys, hw_md));
  if (env.resume) {
    KF_ASSIGN_OR_RETURN(plan->store, OpenRunStore(plan->run_dir));
  } else {
    KF_RETURN_IF_ERROR(ClaimRunDir(*plan, asked_name, env.default_name));
  }
  if (!plan->spec.canary.empty())
    KF_RETURN_IF_ERROR(PlantCanaryFile(plan->run_dir, plan->spec.canary));
  return plan;
}

RunDeps RunPlan::Deps() const {
  RunDeps deps;
  deps.llm = llm.get();
  deps.store = store.get();
  deps.gpu_sets = pools->gpu;
  deps.compilers = pools->compile;
  deps.gpu_set_names = pools->gpu_names;
  deps.compiler_names = pools->compile_names;
  deps.gpu_set_groups = pools->gpu_groups;
  deps.compiler_groups = pools->compile_groups;
  return deps;
}

}  // namespace kforge::agent
