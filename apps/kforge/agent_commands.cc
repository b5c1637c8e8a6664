// `kforge run` (many models x tasks under one strategy, resumable) and
// `kforge prompt` (print exactly what a session would send first).
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <thread>

#include "command.h"
#include "exit_codes.h"
#include "json_output.h"
#include "kforge/agent/adapters.h"
#include "kforge/agent/hardware_card.h"
#include "kforge/agent/prompt.h"
#include "kforge/agent/run_config.h"
#include "kforge/agent/run_plan.h"
#include "kforge/agent/runner.h"
#include "kforge/agent/strategy.h"
#include "kforge/core/clock.h"
#include "kforge/core/strings.h"
#include "kforge/evaluator/evaluate.h"
#include "kforge/evaluator/task.h"
#include "kforge/evaluator/task_select.h"
#include "rejudge_command.h"
#include "run_pools.h"

namespace kforge::cli {
namespace {

namespace fs = std::filesystem;
using agent::RunConfig;

// A usage error: the command never started.
int Fail(const char* cmd, const std::string& message) {
  return FailWith(cmd, Error(ErrorKind::kInvalidInput, message));
}

// The card for the prompt: a named profile, else the probe, else none.
std::string HardwareMarkdown(const std::string& profile, const std::vector<int>& gpus, int world,
                             const fs::path& prompts_dir, std::string* why_none,
                             eval::HardwareCard* card_out) {
  Result<eval::HardwareCard> card = profile.empty()
                                        ? eval::ProbeHardware(gpus)
                                        : agent::FindHardwareProfile(profile, prompts_dir);
  if (!card.ok()) {
    *why_none = card.status().message();
    return "";
  }
  eval::HardwareCard trimmed = profile.empty() ? *card : card->Trimmed(world);
  if (card_out) *card_out = trimmed;
  return agent::RenderHardwareCard(trimmed);
}

// ---- kforge prompt ----

struct PromptArgs {
  std::string task, strategy = "refine", hardware, dtype, tasks_dir;
  int world = 2;
};

int RunPrompt(const PromptArgs& a) {
  fs::path dir = eval::TasksDir(a.tasks_dir);
  auto tasks = eval::LoadCheckedTasks(dir);
  if (!tasks.ok()) return FailWith("prompt", tasks.status());
  auto selected = eval::SelectOneTask(*tasks, a.task, dir.string());
  if (!selected.ok()) return FailWith("prompt", selected.status());
  const eval::Task* task = *selected;
  fs::path prompts = agent::DefaultPromptsDir();
  auto strategy = agent::FindStrategy(a.strategy, prompts);
  if (!strategy.ok()) return FailWith("prompt", strategy.status());
  std::string why;
  std::string hw = HardwareMarkdown(a.hardware, {}, a.world, prompts, &why, nullptr);
  if (hw.empty()) {
    if (!a.hardware.empty()) return Fail("prompt", why);
    std::fprintf(stderr,
                 "kforge prompt: no hardware card (%s); pass --hardware h100_8|h200_8|b200_8\n",
                 why.c_str());
  }
  auto in = agent::TaskPromptInputs(*task, a.world, a.dtype, *strategy, hw);
  if (!in.ok()) return FailWith("prompt", in.status());
  auto p = agent::BuildPrompt(*strategy, *in);
  if (!p.ok()) return FailWith("prompt", p.status());
  std::printf("===== system =====\n%s\n===== user =====\n%s", p->system.c_str(), p->user.c_str());
  return 0;
}

void AddPrompt(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<PromptArgs>();
  CLI::App* cmd = app.add_subcommand("prompt", "print the first prompt a session would send");
  cmd->add_option("--task", a->task, "task key, number or name")->required();
  cmd->add_option("--strategy", a->strategy, "strategy name or file (prompts/strategies)");
  cmd->add_option("--hardware", a->hardware,
                  "hardware profile (prompts/hardware) instead of probing the GPUs");
  cmd->add_option("--world", a->world, "world size W (must be one the task declares)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--dtype", a->dtype, "the task's T (default: its first dtype)");
  cmd->add_option("--tasks-dir", a->tasks_dir, "where tasks live");
  cmd->callback([a, &exit_code] { exit_code = RunPrompt(*a); });
}

// ---- kforge run ----

struct RunArgs {
  std::string run_file, resume, rejudge, name, models, tasks, strategy, dtype, hardware, deadline,
      out = "runs", tasks_dir;
  int turns = 0, samples = 0, repeats = 0, world = 0, llm_concurrency = 0, compile_jobs = 0;
  double baseline_reuse_s = -1;
  std::vector<int> gpus;
  std::vector<std::string> registries;
  std::string json;    // --json FILE|-: the summary
  std::string record;  // --record FILE: the model exchanges, as a replay cassette
  std::string evaluators, evaluators_dir, eval_token_file;
  double evaluator_liveness_s = -1;
  bool slurm = false;
  int slurm_nodes = 0, slurm_gpus_per_node = -1;
  std::string slurm_partition, slurm_time;
  double budget_usd = -1, model_budget_usd = -1, task_budget_usd = -1, budget_wall_s = -1;
  int64_t budget_tokens = -1, model_budget_tokens = -1;
  bool compile_only = false;
  bool no_cache = false;  // --no-cache: ask every model, whatever the response cache holds
};

// --slurm and its options (a run file's [slurm] table says the same).
void ApplySlurmFlags(const RunArgs& a, RunConfig* c) {
  if (a.slurm || a.slurm_nodes > 0) c->slurm_nodes = std::max({1, c->slurm_nodes, a.slurm_nodes});
  if (a.slurm_nodes > 0) c->slurm_nodes = a.slurm_nodes;
  if (a.slurm_gpus_per_node >= 0) c->slurm_gpus_per_node = a.slurm_gpus_per_node;
  if (!a.slurm_partition.empty()) c->slurm_partition = a.slurm_partition;
  if (!a.slurm_time.empty()) c->slurm_time = a.slurm_time;
}

// The flags that change what a run asks (its sessions and prompts): a
// resume continues the stored run as it was asked, so it refuses them.
std::vector<std::string> FlagsAResumeCannotChange(const RunArgs& a) {
  std::vector<std::string> out;
  auto given = [&out](bool is_given, const char* flag) {
    if (is_given) out.push_back(flag);
  };
  given(!a.run_file.empty(), "a run file");
  given(!a.name.empty(), "--name");
  given(!a.models.empty(), "--models");
  given(!a.tasks.empty(), "--tasks");
  given(!a.strategy.empty(), "--strategy");
  given(a.turns > 0, "--turns");
  given(a.samples > 0, "--samples");
  given(a.repeats > 0, "--repeats");
  given(a.world > 0, "--world");
  given(!a.dtype.empty(), "--dtype");
  given(!a.hardware.empty(), "--hardware");
  return out;
}

std::string Dollars(const std::optional<double>& v) {
  return v ? fmt::format("${:g}", *v) : "none";
}
std::string Seconds(const std::optional<double>& v) {
  return v ? fmt::format("{:g} s", *v) : "none";
}
std::string Tokens(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "none"; }
std::string When(const std::optional<double>& unix_s) {
  if (!unix_s) return "none";
  char buf[32];
  const std::time_t t = static_cast<std::time_t>(*unix_s);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M", std::localtime(&t));
  return buf;
}

// --deadline and the budgets on a resume: the new limits replace the stored
// ones (and are stored with the run); each change is named for the log.
Status ApplyLimitFlags(const RunArgs& a, RunConfig* c, std::vector<std::string>* changes) {
  const RunConfig before = *c;
  if (a.budget_usd >= 0) c->budgets.run.usd = a.budget_usd;
  if (a.budget_tokens >= 0) c->budgets.run.tokens = a.budget_tokens;
  if (a.budget_wall_s >= 0) c->budgets.run.wall_s = a.budget_wall_s;
  if (a.model_budget_usd >= 0) c->budgets.per_model.usd = a.model_budget_usd;
  if (a.model_budget_tokens >= 0) c->budgets.per_model.tokens = a.model_budget_tokens;
  if (a.task_budget_usd >= 0) c->budgets.per_task.usd = a.task_budget_usd;
  if (!a.deadline.empty()) {
    KF_ASSIGN_OR_RETURN(c->deadline_unix,
                        agent::ParseDeadline(a.deadline, static_cast<double>(std::time(nullptr))));
  }
  if (!changes) return Status::Ok();
  auto note = [changes](const char* what, const std::string& from, const std::string& to) {
    if (from != to) changes->push_back(fmt::format("{} {} -> {}", what, from, to));
  };
  note("deadline", When(before.deadline_unix), When(c->deadline_unix));
  const auto& b = before.budgets;
  const auto& n = c->budgets;
  note("run budget", Dollars(b.run.usd), Dollars(n.run.usd));
  note("run token budget", Tokens(b.run.tokens), Tokens(n.run.tokens));
  note("run wall-clock budget", Seconds(b.run.wall_s), Seconds(n.run.wall_s));
  note("per-model budget", Dollars(b.per_model.usd), Dollars(n.per_model.usd));
  note("per-model token budget", Tokens(b.per_model.tokens), Tokens(n.per_model.tokens));
  note("per-task budget", Dollars(b.per_task.usd), Dollars(n.per_task.usd));
  return Status::Ok();
}

// The config: stored (resume), else the run file, then flags on top.
// `resume_changes`: what a resume changed in the stored config, for the log.
Result<RunConfig> ConfigFromArgs(const RunArgs& a, bool* default_name,
                                 std::vector<std::string>* resume_changes) {
  RunConfig c;
  *default_name = false;
  if (!a.resume.empty()) {
    if (auto fixed = FlagsAResumeCannotChange(a); !fixed.empty()) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("--resume {} continues the run as it was asked; {} would change "
                               "what it asks. A resume may change --deadline, the --budget-* "
                               "flags, and where and how fast it evaluates (--compile-only, "
                               "--gpus, --evaluators, --llm-concurrency, --compile-jobs, ...); "
                               "for anything else start a new run with --name",
                               a.resume, fmt::join(fixed, ", ")));
    }
    KF_ASSIGN_OR_RETURN(c, agent::StoredRunConfig(a.out, a.resume));
    c.out = a.out;
    KF_RETURN_IF_ERROR(ApplyLimitFlags(a, &c, resume_changes));
    // How fast and on which GPUs: this resume only.
    if (!a.gpus.empty()) c.gpus = a.gpus;
    if (a.llm_concurrency > 0) c.llm_concurrency = a.llm_concurrency;
    if (a.compile_jobs > 0) c.compile_jobs = a.compile_jobs;
    if (a.baseline_reuse_s >= 0) c.baseline_reuse_s = a.baseline_reuse_s;
    if (a.compile_only) c.compile_only = true;
    if (!a.tasks_dir.empty()) c.tasks_dir = a.tasks_dir;
    if (!a.registries.empty()) c.registries = a.registries;
    // Servers change between a run and its resume.
    if (!a.evaluators.empty()) c.evaluators = Split(a.evaluators, ',');
    if (!a.evaluators_dir.empty()) c.evaluators_dir = a.evaluators_dir;
    if (!a.eval_token_file.empty()) c.eval_token_file = a.eval_token_file;
    if (a.evaluator_liveness_s >= 0) c.evaluator_liveness_s = a.evaluator_liveness_s;
    ApplySlurmFlags(a, &c);
    return c;
  }
  if (!a.run_file.empty()) {
    KF_ASSIGN_OR_RETURN(c, agent::LoadRunFile(a.run_file));
  }
  if (!a.name.empty()) c.name = a.name;
  if (!a.tasks_dir.empty()) c.tasks_dir = a.tasks_dir;
  if (!a.registries.empty()) c.registries = a.registries;
  if (!a.models.empty()) c.models = Split(a.models, ',');
  if (!a.tasks.empty()) c.tasks = Split(a.tasks, ',');
  if (!a.strategy.empty()) c.strategy = a.strategy;
  if (a.turns > 0) c.turns = a.turns;
  if (a.samples > 0) c.samples = a.samples;
  if (a.repeats > 0) c.repeats = a.repeats;
  if (a.world > 0) c.world = a.world;
  if (!a.dtype.empty()) c.dtype = a.dtype;
  if (!a.gpus.empty()) c.gpus = a.gpus;
  if (!a.hardware.empty()) c.hardware = a.hardware;
  if (a.compile_only) c.compile_only = true;
  if (a.llm_concurrency > 0) c.llm_concurrency = a.llm_concurrency;
  if (a.compile_jobs > 0) c.compile_jobs = a.compile_jobs;
  if (a.baseline_reuse_s >= 0) c.baseline_reuse_s = a.baseline_reuse_s;
  if (!a.evaluators.empty()) c.evaluators = Split(a.evaluators, ',');
  if (!a.evaluators_dir.empty()) c.evaluators_dir = a.evaluators_dir;
  if (!a.eval_token_file.empty()) c.eval_token_file = a.eval_token_file;
  if (a.evaluator_liveness_s >= 0) c.evaluator_liveness_s = a.evaluator_liveness_s;
  ApplySlurmFlags(a, &c);
  for (const auto& url : c.evaluators) {
    if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0)
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("--evaluators: '{}' is not an http:// or https:// URL", url));
  }
  if (a.run_file.empty() || a.out != "runs") c.out = a.out;
  KF_RETURN_IF_ERROR(ApplyLimitFlags(a, &c, nullptr));
  if (c.models.empty())
    return Error(ErrorKind::kInvalidInput, "--models (or a run file) is required");
  if (c.tasks.empty())
    return Error(ErrorKind::kInvalidInput, "--tasks (or a run file) is required");
  if (c.name.empty()) {
    char buf[32];
    std::time_t now = std::time(nullptr);
    std::strftime(buf, sizeof buf, "run-%Y%m%d-%H%M%S", std::localtime(&now));
    c.name = buf;
    *default_name = true;
  }
  return c;
}

// The flags a rejudge takes no notice of: what the original asked its
// models, and the models' limits (no model is called).
std::vector<std::string> FlagsARejudgeRefuses(const RunArgs& a) {
  std::vector<std::string> out;
  auto given = [&out](bool is_given, const char* flag) {
    if (is_given) out.push_back(flag);
  };
  given(!a.run_file.empty(), "a run file");
  given(!a.resume.empty(), "--resume");
  given(!a.strategy.empty(), "--strategy");
  given(a.turns > 0, "--turns");
  given(a.samples > 0, "--samples");
  given(a.repeats > 0, "--repeats");
  given(a.world > 0, "--world");
  given(!a.dtype.empty(), "--dtype");
  given(!a.hardware.empty(), "--hardware");
  given(!a.deadline.empty(), "--deadline");
  given(a.budget_usd >= 0 || a.budget_tokens >= 0 || a.budget_wall_s >= 0 ||
            a.model_budget_usd >= 0 || a.model_budget_tokens >= 0 || a.task_budget_usd >= 0,
        "--budget-*");
  given(!a.record.empty(), "--record");
  return out;
}

// --rejudge RUN, or --resume of a run that is a rejudge.
int Rejudge(const RunArgs& a, bool resume) {
  RejudgeArgs r;
  r.source = resume ? a.resume : a.rejudge;
  r.resume = resume;
  r.json = a.json;
  RunConfig& c = r.here;
  c.name = a.name;
  c.out = a.out;
  if (!a.models.empty()) c.models = Split(a.models, ',');
  if (!a.tasks.empty()) c.tasks = Split(a.tasks, ',');
  c.gpus = a.gpus;
  c.compile_only = a.compile_only;
  if (a.compile_jobs > 0) c.compile_jobs = a.compile_jobs;
  if (a.baseline_reuse_s >= 0) c.baseline_reuse_s = a.baseline_reuse_s;
  c.tasks_dir = a.tasks_dir;
  if (!a.evaluators.empty()) c.evaluators = Split(a.evaluators, ',');
  c.evaluators_dir = a.evaluators_dir;
  c.eval_token_file = a.eval_token_file;
  if (a.evaluator_liveness_s >= 0) c.evaluator_liveness_s = a.evaluator_liveness_s;
  ApplySlurmFlags(a, &c);
  return RunRejudge(r);
}

int RunRun(const RunArgs& a) {
  if (!a.rejudge.empty()) {
    if (auto refused = FlagsARejudgeRefuses(a); !refused.empty()) {
      return Fail("run", fmt::format("--rejudge {} judges the recorded turns again without "
                                     "calling a model; {} would not apply. It takes --tasks and "
                                     "--models (to keep some sessions), --name, --out, and "
                                     "where and how it evaluates (--compile-only, --gpus, "
                                     "--compile-jobs, --evaluators, ...)",
                                     a.rejudge, fmt::join(refused, ", ")));
    }
    return Rejudge(a, false);
  }
  if (!a.resume.empty()) {
    // A rejudge is resumed as a rejudge: its sessions have no model to ask.
    auto stored = agent::StoredRunConfig(a.out, a.resume);
    if (stored.ok() && !stored->rejudge_of.empty()) {
      if (auto fixed = FlagsAResumeCannotChange(a); !fixed.empty())
        return Fail("run", fmt::format("--resume {}: a rejudge continues as it was asked; {} "
                                       "would change it",
                                       a.resume, fmt::join(fixed, ", ")));
      return Rejudge(a, true);
    }
  }
  bool default_name = false;
  std::vector<std::string> resume_changes;
  auto cfg = ConfigFromArgs(a, &default_name, &resume_changes);
  if (!cfg.ok()) return FailWith("run", cfg.status());
  agent::PlanEnv env;
  env.resume = !a.resume.empty();
  env.default_name = default_name;
  env.remote_pools = MakeRemotePools;
  env.record = a.record;
  env.use_cache = !a.no_cache;
  auto plan_or = agent::PlanRun(*cfg, env);
  if (!plan_or.ok()) return FailWith("run", plan_or.status());
  agent::RunPlan& plan = **plan_or;
  for (const auto& notice : plan.notices) std::fprintf(stderr, "kforge run: %s\n", notice.c_str());
  if (!resume_changes.empty()) {
    std::fprintf(stderr, "kforge run: resuming '%s' with %s (stored with the run)\n",
                 plan.config.name.c_str(),
                 fmt::format("{}", fmt::join(resume_changes, "; ")).c_str());
  }
  std::vector<std::vector<int>> cpus(3);
  cpus[static_cast<size_t>(agent::Pool::kGpu)] = plan.pools->gpu_cpus;
  cpus[static_cast<size_t>(agent::Pool::kCompile)] = plan.pools->compile_cpus;
  cpus[static_cast<size_t>(agent::Pool::kLlm)] = plan.pools->compile_cpus;
  auto executor = agent::MakeThreadExecutor(std::move(cpus));
  agent::ProgressView progress(
      stderr, agent::WantsLiveView(isatty(fileno(stderr)) != 0, std::getenv("TERM")), RealClock());
  agent::RunDeps deps = plan.Deps();
  deps.clock = &RealClock();
  deps.executor = executor.get();
  deps.progress = &progress;
  const RunConfig& c = plan.config;
  const std::string store = plan.run_dir.string();
  std::fprintf(stderr,
               "kforge run %s: %zu model(s) x %zu task(s) x %d, strategy %s, W=%d, store %s\n",
               c.name.c_str(), c.models.size(), plan.spec.tasks.size(), c.repeats,
               plan.strategy.name.c_str(), c.world, store.c_str());
  if (plan.pools->remote)
    std::fprintf(stderr, "kforge run: evaluating on %s\n", plan.pools->where.c_str());
  if (!plan.pools->gpu_cpus.empty()) {
    std::fprintf(stderr,
                 "kforge run: GPU evaluations pinned to %zu CPUs (%d..%d), compiles and model "
                 "calls to the other %zu\n",
                 plan.pools->gpu_cpus.size(), plan.pools->gpu_cpus.front(),
                 plan.pools->gpu_cpus.back(), plan.pools->compile_cpus.size());
  }
  auto summary = agent::ExecuteRun(plan.spec, deps);
  if (!summary.ok()) {
    std::fprintf(stderr, "kforge run: %s (the run is resumable: kforge run --resume %s)\n",
                 summary.status().ToString().c_str(), c.name.c_str());
    return kExitFailed;
  }
  if (!a.json.empty()) {
    nlohmann::json doc = agent::RunSummaryJson(*summary);
    doc["store"] = store;
    if (Status st = WriteJson(a.json, doc); !st.ok()) return FailWith("run", st);
  }
  if (a.json != "-")
    std::printf("%sstore: %s\n", agent::RenderRunSummary(*summary).c_str(), store.c_str());
  return summary->AllFailed() ? kExitFailed : kExitOk;
}

void AddRun(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "run models x tasks under a strategy (resumable)");
  // No ExistingFile check here: CLI11 would report a misspelled flag's value
  // as a missing run file before naming the flag. LoadRunFile names the file.
  cmd->add_option("run_file", a->run_file, "a run file (TOML); flags override it");
  cmd->add_option("--resume", a->resume, "continue the run called NAME where it stopped");
  cmd->add_option("--rejudge", a->rejudge,
                  "judge run RUN's recorded kernels again on this machine's evaluator, into a "
                  "new run (RUN-rejudge-N unless --name); no model is called. --tasks and "
                  "--models keep only the sessions they match");
  cmd->add_option("--name", a->name, "the run's name (default run-DATE-TIME)");
  cmd->add_option("--models", a->models,
                  "model specs, comma-separated (e.g. openai:gpt-5.5,anthropic:claude-opus-4-7)");
  cmd->add_option("--tasks", a->tasks,
                  "task selectors, comma-separated: keys, numbers, names, globs, categories");
  cmd->add_option("--strategy", a->strategy, "strategy name or file (default refine)");
  cmd->add_option("--turns", a->turns, "override the strategy's turns")->check(CLI::Range(1, 1000));
  cmd->add_option("--samples", a->samples, "override the strategy's samples per turn")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--repeats", a->repeats, "independent sessions per model and task")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--world", a->world, "world size W (default 2)")->check(CLI::Range(1, 64));
  cmd->add_option("--dtype", a->dtype, "the tasks' T (default: each task's first)");
  cmd->add_option("--gpus", a->gpus, "GPUs to use, e.g. 0,1,2,3")->delimiter(',');
  cmd->add_option("--hardware", a->hardware,
                  "hardware profile for the prompt instead of the probe");
  cmd->add_flag("--compile-only", a->compile_only, "compile and policy-check only (no GPU)");
  cmd->add_option("--budget-usd", a->budget_usd,
                  "dollars for the whole run, shared evenly by its models")
      ->check(NonNegative());
  cmd->add_option("--budget-tokens", a->budget_tokens,
                  "tokens for the whole run, shared evenly by its models")
      ->check(NonNegative());
  cmd->add_option("--budget-wall", a->budget_wall_s, "wall-clock seconds for the whole run")
      ->check(NonNegative());
  cmd->add_option("--model-budget-usd", a->model_budget_usd, "dollars per model")
      ->check(NonNegative());
  cmd->add_option("--model-budget-tokens", a->model_budget_tokens, "tokens per model")
      ->check(NonNegative());
  cmd->add_option("--task-budget-usd", a->task_budget_usd, "dollars per model and task")
      ->check(NonNegative());
  cmd->add_option("--deadline", a->deadline,
                  "no new model calls after: YYYY-MM-DDTHH:MM, +8h, +90m");
  cmd->add_option("--llm-concurrency", a->llm_concurrency,
                  "model calls in flight per model (default 4)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--compile-jobs", a->compile_jobs,
                  "concurrent compiles (default: the CPU cores the GPU evaluations leave)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--baseline-reuse", a->baseline_reuse_s,
                  "seconds a timed baseline is reused, confirmed each time (default 600; 0: "
                  "time it around every candidate)")
      ->check(NonNegative());
  cmd->add_option("--out", a->out, "where run directories go (default runs)");
  cmd->add_option("--tasks-dir", a->tasks_dir, "where tasks live");
  cmd->add_option("--evaluators", a->evaluators,
                  "evaluate on these eval-servers, comma-separated base URLs (docs/scale.md)");
  cmd->add_option("--evaluators-dir", a->evaluators_dir,
                  "evaluate on the eval-servers registered in this rendezvous directory");
  cmd->add_option("--eval-token-file", a->eval_token_file,
                  "the eval-servers' bearer token (mode 0600; default $KFORGE_EVAL_TOKEN)");
  cmd->add_option("--evaluator-liveness", a->evaluator_liveness_s,
                  "requeue a job whose eval-server answered no health check for this many "
                  "seconds (default 60; 0: wait for the job)")
      ->check(NonNegative());
  cmd->add_flag("--slurm", a->slurm,
                "start eval-servers through Slurm for this run and stop them after it");
  cmd->add_option("--slurm-nodes", a->slurm_nodes, "servers (nodes) for --slurm (default 1)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--slurm-gpus-per-node", a->slurm_gpus_per_node,
                  "GPUs per server for --slurm (default: W; 0 with --compile-only)")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--slurm-partition", a->slurm_partition, "Slurm partition for --slurm");
  cmd->add_option("--slurm-time", a->slurm_time, "Slurm time limit for --slurm, e.g. 12:00:00");
  cmd->add_option("--registry", a->registries,
                  "extra model registry file(s), after ~/.config/kforge/models.toml");
  cmd->add_option("--record", a->record,
                  "append every model exchange to this replay cassette (replay it later with "
                  "--models replay:FILE)");
  cmd->add_flag("--no-cache", a->no_cache,
                "ask every model, neither reading nor writing the response cache");
  AddJsonOption(cmd, a->json);
  cmd->callback([a, &exit_code] { exit_code = RunRun(*a); });
}

KF_COMMAND("prompt", AddPrompt);
KF_COMMAND("run", AddRun);

}  // namespace
}  // namespace kforge::cli
