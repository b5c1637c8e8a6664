// Planning `kforge run --rejudge RUN`: which stored run, which of its
// sessions, this machine's tasks and evaluators, and the new run's store.
#include "kforge/agent/rejudge_plan.h"

#include <fmt/format.h>

#include <set>

#include "breach.h"
#include "kforge/agent/adapters.h"
#include "kforge/agent/run_fields.h"
#include "kforge/evaluator/suite_hash.h"
#include "kforge/evaluator/task_select.h"
#include "kforge/results/samples.h"
#include "kforge/results/store.h"

namespace kforge::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kMaxNameChoices = 1000;

struct Source {
  fs::path dir;
  results::RunInfo run;
};

std::string RunNames(const std::vector<results::RunInfo>& runs) {
  std::vector<std::string> names;
  for (const auto& r : runs) names.push_back(r.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

// RUN, DIR or DIR:NAME, as the header says.
Result<Source> FindSource(const std::string& arg, const fs::path& out) {
  std::string dir_arg = arg, name;
  auto dir = results::ResolveRunDir(arg, out);
  if (!dir.ok()) {
    const size_t colon = arg.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == arg.size()) {
      return Error(ErrorKind::kNotFound, fmt::format("--rejudge: no run '{}' to rejudge ({})", arg,
                                                     dir.status().message()));
    }
    dir_arg = arg.substr(0, colon);
    name = arg.substr(colon + 1);
    dir = results::ResolveRunDir(dir_arg, out);
    if (!dir.ok()) {
      return Error(ErrorKind::kNotFound, fmt::format("--rejudge: no run '{}' to rejudge ({})", arg,
                                                     dir.status().message()));
    }
  }
  KF_ASSIGN_OR_RETURN(auto store, results::RunStore::Open(*dir, true));
  KF_ASSIGN_OR_RETURN(std::vector<results::RunInfo> runs, store->ListRuns());
  if (name.empty() && runs.size() == 1) return Source{*dir, runs.front()};
  const std::string want = name.empty() ? fs::path(dir_arg).filename().string() : name;
  for (const auto& r : runs) {
    if (r.name == want) return Source{*dir, r};
  }
  return Error(
      ErrorKind::kNotFound,
      fmt::format("--rejudge: no run '{}' in {} (it holds {}); name one as {}:NAME", want,
                  dir->string(), runs.empty() ? "no run" : "runs " + RunNames(runs), dir_arg));
}

// The original's sessions, with their turns, that the filters keep.
Result<std::vector<StoredSession>> ReadSessions(const Source& src,
                                                const std::set<std::string>& tasks,
                                                const std::set<std::string>& models) {
  KF_ASSIGN_OR_RETURN(auto store, results::RunStore::Open(src.dir, true));
  KF_ASSIGN_OR_RETURN(std::vector<results::SessionRecord> rows, store->ListSessions(src.run.id));
  std::vector<StoredSession> out;
  for (const auto& r : rows) {
    if (!tasks.empty() && !tasks.count(r.key.task)) continue;
    if (!models.empty() && !models.count(r.key.model)) continue;
    StoredSession s;
    s.row = r;
    KF_ASSIGN_OR_RETURN(s.turns, store->ListTurns(r.id));
    for (TurnRecord& t : s.turns) {
      // The ids are the source store's; the rejudge's own store numbers its
      // rows and dates its copies.
      t.id = 0;
      t.session_id = 0;
      t.created_at = 0;
    }
    out.push_back(std::move(s));
  }
  return out;
}

// The tasks and models filters, each checked against what the run holds.
Status Filters(const RunConfig& here, const std::vector<eval::Task>& suite,
               const std::vector<StoredSession>& all, const std::string& run,
               std::set<std::string>* tasks, std::set<std::string>* models) {
  std::set<std::string> run_tasks, run_models;
  for (const auto& s : all) {
    run_tasks.insert(s.row.key.task);
    run_models.insert(s.row.key.model);
  }
  for (const auto& m : here.models) {
    if (!run_models.count(m)) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("--models: run '{}' has no sessions of model '{}' (its models: {})",
                               run, m, fmt::join(run_models, ", ")));
    }
    models->insert(m);
  }
  if (here.tasks.empty()) return Status::Ok();
  std::vector<eval::TaskRef> refs;
  for (const auto& t : suite) refs.push_back(eval::RefFor(t));
  KF_ASSIGN_OR_RETURN(std::vector<std::string> keys, eval::SelectTasks(here.tasks, refs));
  for (const auto& k : keys) {
    if (run_tasks.count(k)) tasks->insert(k);
  }
  if (tasks->empty()) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("--tasks: run '{}' has no sessions of the tasks selected ({}; its "
                             "tasks: {})",
                             run, fmt::join(keys, ", "), fmt::join(run_tasks, ", ")));
  }
  return Status::Ok();
}

// The new run's name: asked, or SOURCE-rejudge-N with the first N whose
// directory holds no store.
Result<std::string> NewName(const RunConfig& here, const std::string& source) {
  if (!here.name.empty()) {
    if (fs::exists(results::StorePath(fs::path(here.out) / here.name))) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("run '{}' already exists in {}; pick another --name", here.name,
                               (fs::path(here.out) / here.name).string()));
    }
    return here.name;
  }
  for (int n = 1; n <= kMaxNameChoices; ++n) {
    const std::string name = fmt::format("{}-rejudge-{}", source, n);
    if (!fs::exists(results::StorePath(fs::path(here.out) / name))) return name;
  }
  return Error(ErrorKind::kInvalidInput,
               fmt::format("{}: {} runs named {}-rejudge-N already; pass --name", here.out,
                           kMaxNameChoices, source));
}

// The original's config with this invocation's say on where and how it
// evaluates (the fields of those roles, run_fields.h), but for what only a
// model call uses and the tasks folder (found above); GPUs when asked.
RunConfig EvaluatingConfig(RunConfig c, const RunConfig& here) {
  auto is = [](const RunField& f, auto member) { return f.member == FieldMember(member); };
  for (const RunField& f : RunFields()) {
    if (f.role != FieldRole::kEvaluates && f.role != FieldRole::kServers &&
        f.role != FieldRole::kOut)
      continue;
    if (is(f, &RunConfig::llm_concurrency) || is(f, &RunConfig::registries) ||
        is(f, &RunConfig::tasks_dir) || (is(f, &RunConfig::gpus) && here.gpus.empty()))
      continue;
    CopyField(f, here, &c);
  }
  return c;
}

}  // namespace

RunDeps RejudgePlan::Deps() const {
  RunDeps deps;
  deps.store = store.get();
  deps.gpu_sets = pools->gpu;
  deps.compilers = pools->compile;
  deps.gpu_set_names = pools->gpu_names;
  deps.compiler_names = pools->compile_names;
  deps.gpu_set_groups = pools->gpu_groups;
  deps.compiler_groups = pools->compile_groups;
  return deps;
}

Result<std::unique_ptr<RejudgePlan>> PlanRejudge(const std::string& source, const RunConfig& here,
                                                 const PlanEnv& env) {
  auto plan = std::make_unique<RejudgePlan>();
  KF_ASSIGN_OR_RETURN(Source src, FindSource(source, here.out));
  plan->source_dir = src.dir;
  KF_ASSIGN_OR_RETURN(RunConfig original, RunConfigFromJson(src.run.config));
  if (!env.resume && !original.rejudge_of.empty()) {
    plan->notices.push_back(
        fmt::format("'{}' is itself a rejudge of '{}'", src.run.name, original.rejudge_of));
  }
  if (env.resume && original.rejudge_of.empty()) {
    return Error(ErrorKind::kInvalidInput, fmt::format("run '{}' is not a rejudge", src.run.name));
  }
  // The tasks: asked, else the original's folder when this machine has it.
  std::string tasks_flag = here.tasks_dir;
  std::error_code ec;
  if (tasks_flag.empty() && !original.tasks_dir.empty() && fs::is_directory(original.tasks_dir, ec))
    tasks_flag = original.tasks_dir;
  plan->tasks_dir = eval::TasksDir(tasks_flag);
  KF_ASSIGN_OR_RETURN(plan->tasks, eval::LoadCheckedTasks(plan->tasks_dir));

  KF_ASSIGN_OR_RETURN(std::vector<StoredSession> all, ReadSessions(src, {}, {}));
  std::set<std::string> tasks, models;
  KF_RETURN_IF_ERROR(Filters(here, plan->tasks, all, src.run.name, &tasks, &models));
  if (!tasks.empty() || !models.empty()) {
    KF_ASSIGN_OR_RETURN(all, ReadSessions(src, tasks, models));
  }
  if (all.empty()) {
    return Error(ErrorKind::kInvalidInput, fmt::format("run '{}' in {} has no sessions to rejudge",
                                                       src.run.name, src.dir.string()));
  }
  for (const auto& s : all) {
    if (!eval::FindTask(plan->tasks, s.row.key.task)) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("run '{}' has sessions of task '{}', which is not in {} (pass "
                               "--tasks-dir, or --tasks to leave it out)",
                               src.run.name, s.row.key.task, plan->tasks_dir.string()));
    }
  }
  KF_ASSIGN_OR_RETURN(std::string suite_hash, eval::TaskSuiteHash(plan->tasks_dir));
  if (!src.run.task_suite_hash.empty() && src.run.task_suite_hash != suite_hash) {
    plan->notices.push_back(fmt::format(
        "the tasks in {} differ from those run '{}' was made with (task-suite hash {} here, {} "
        "there): its kernels are judged by these",
        plan->tasks_dir.string(), src.run.name, suite_hash.substr(0, 12),
        src.run.task_suite_hash.substr(0, 12)));
  }

  std::string name = src.run.name;
  if (!env.resume) {
    KF_ASSIGN_OR_RETURN(name, NewName(here, src.run.name));
  }
  plan->run_dir = fs::path(here.out) / name;
  plan->config = EvaluatingConfig(original, here);
  // A rejudge asked to profile keeps profiling when it is resumed, so that
  // every document it judges has a profile (the flag cannot be un-given).
  if (env.resume) plan->config.profile = here.profile || original.profile;
  plan->config.name = name;
  if (!env.resume) {
    plan->config.rejudge_of = src.run.name;
    plan->config.rejudge_of_store = fs::absolute(src.dir, ec).string();
  }
  // The rejudge of a red-team run (the original planted a canary; a resumed
  // rejudge, its own) plants one too, before any pool starts a thread.
  if (fs::exists(src.dir / kCanaryFile, ec))
    plan->spec.canary = ChooseCanary(plan->run_dir, env.resume);
  if (env.remote_pools) {
    KF_ASSIGN_OR_RETURN(plan->pools, env.remote_pools(plan->config, suite_hash, plan->run_dir));
  }
  if (!plan->pools) {
    KF_ASSIGN_OR_RETURN(plan->pools, LocalEvalPools(plan->config, &plan->tasks));
  }
  if (plan->pools->compile_only) {
    plan->notices.push_back(fmt::format(
        "no GPU evaluation ({}). Kernels will be compiled and policy-checked only; resume the "
        "rejudge on a GPU machine (kforge run --resume {}) to evaluate them.",
        plan->pools->no_gpu_reason, name));
  }

  RejudgeSpec& spec = plan->spec;
  spec.name = name;
  spec.sessions = std::move(all);
  spec.compile_only = plan->pools->compile_only;
  spec.profile = plan->config.profile;
  spec.timing_cap_s = plan->config.timing_cap_s;
  spec.pools.compile_slots = static_cast<int>(plan->pools->compile.size());
  spec.pools.gpu_sets = static_cast<int>(plan->pools->gpu.size());
  spec.hardware = plan->pools->card ? eval::ToJson(*plan->pools->card) : json::object();
  spec.config = src.run.config;
  const json asked = RunConfigToJson(plan->config);
  for (const auto& [key, value] : asked.items()) spec.config[key] = value;
  spec.config["task_suite_hash"] = suite_hash;
  spec.task_suite_hash = suite_hash;
  json resolved = spec.config.value("resolved", json::object());
  resolved["compile_only"] = spec.compile_only;
  resolved["tasks_dir"] = plan->tasks_dir.string();
  if (!tasks.empty()) resolved["tasks"] = tasks;
  spec.config["resolved"] = resolved;

  if (env.resume) {
    KF_ASSIGN_OR_RETURN(plan->store, OpenRunStore(plan->run_dir));
  } else {
    auto store = CreateRunStore(plan->run_dir);
    if (!store.ok() && store.status().kind() == ErrorKind::kInvalidInput) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("run '{}' was created in {} by another kforge run starting at the "
                               "same time; pick another --name",
                               name, plan->run_dir.string()));
    }
    KF_ASSIGN_OR_RETURN(plan->store, std::move(store));
  }
  if (!plan->spec.canary.empty())
    KF_RETURN_IF_ERROR(PlantCanaryFile(plan->run_dir, plan->spec.canary));
  return plan;
}

}  // namespace kforge::agent
