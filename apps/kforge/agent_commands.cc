// `kforge run` (many models x tasks under one strategy, resumable) and
// `kforge prompt` (print exactly what a session would send first).
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>

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
#include "kforge/evaluator/evaluate.h"
#include "kforge/evaluator/task.h"
#include "kforge/evaluator/task_select.h"
#include "rejudge_command.h"
#include "run_flags.h"
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
  std::string run_file, resume, rejudge;
  RunFlags flags;         // every flag that sets a RunConfig field
  std::string json;       // --json FILE|-: the summary
  std::string record;     // --record FILE: the model exchanges, as a replay cassette
  bool no_cache = false;  // --no-cache: ask every model, whatever the response cache holds
};

// The flags that change what a run asks (its sessions and prompts): a
// resume continues the stored run as it was asked, so it refuses them.
std::vector<std::string> FlagsAResumeCannotChange(const RunArgs& a) {
  std::vector<std::string> out;
  if (!a.run_file.empty()) out.push_back("a run file");
  for (auto& flag : a.flags.GivenBut(agent::AResumeMayChange)) out.push_back(std::move(flag));
  return out;
}

// The flags a rejudge takes no notice of: what the original asked its
// models, and the models' limits (no model is called).
std::vector<std::string> FlagsARejudgeRefuses(const RunArgs& a) {
  std::vector<std::string> out;
  if (!a.run_file.empty()) out.push_back("a run file");
  if (!a.resume.empty()) out.push_back("--resume");
  for (auto& flag : a.flags.GivenBut(agent::ARejudgeTakes)) out.push_back(std::move(flag));
  if (!a.record.empty()) out.push_back("--record");
  return out;
}

// The config: stored (resume), else the run file, then flags on top.
// `resume_changes`: what a resume changed in the stored config, for the log.
Result<RunConfig> ConfigFromArgs(const RunArgs& a, bool* default_name,
                                 std::vector<std::string>* resume_changes) {
  RunConfig c;
  *default_name = false;
  const std::string& out = a.flags.values().out;
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
    KF_ASSIGN_OR_RETURN(c, agent::StoredRunConfig(out, a.resume));
    c.out = out;
    KF_RETURN_IF_ERROR(a.flags.ApplyTo(&c, resume_changes));
    return c;
  }
  if (!a.run_file.empty()) {
    KF_ASSIGN_OR_RETURN(c, agent::LoadRunFile(a.run_file));
  }
  KF_RETURN_IF_ERROR(a.flags.ApplyTo(&c, nullptr));
  for (const auto& url : c.evaluators) {
    if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0)
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("--evaluators: '{}' is not an http:// or https:// URL", url));
  }
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

// --rejudge RUN, or --resume of a run that is a rejudge: the flags over an
// empty config say the name, out, filters and evaluation options.
int Rejudge(const RunArgs& a, bool resume) {
  RejudgeArgs r;
  r.source = resume ? a.resume : a.rejudge;
  r.resume = resume;
  r.json = a.json;
  if (Status st = a.flags.ApplyTo(&r.here, nullptr); !st.ok()) return FailWith("run", st);
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
    auto stored = agent::StoredRunConfig(a.flags.values().out, a.resume);
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
  a->flags.Add(cmd);
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
