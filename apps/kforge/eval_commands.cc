// `kforge eval`: evaluate one kernel file for one task.
#include <cstdio>
#include <iostream>

#include "command.h"
#include "exit_codes.h"
#include "json_output.h"
#include "kforge/core/fs.h"
#include "kforge/evaluator/evaluate.h"
#include "kforge/evaluator/hardware.h"
#include "kforge/evaluator/report.h"
#include "kforge/evaluator/service.h"
#include "kforge/evaluator/task_select.h"

namespace kforge::cli {
namespace {

struct EvalArgs {
  std::string task;
  std::string kernel;
  int world = 0;
  std::vector<int> gpus;
  std::string dtype;
  std::string json_out;
  std::string dump_dir;
  std::string tasks_dir;
  std::string cache_dir;
  std::string arch;
  int trials = 5;
  double timing_precision = 0.005;
  double timing_cap_s = 0.5;
  double candidate_budget_s = eval::EvalOptions{}.candidate_budget_s;
  bool no_timing = false;
  bool compile_only = false;
  bool trusted = false;
  bool nccl_self_test = false;
  bool profile = false;
  bool no_expert = false;
  std::vector<std::string> bench_sizes;
};

// The evaluation options the flags ask for; --dump's directory is made (and
// must be empty: a dump never mixes with, or overwrites, an earlier one).
Result<eval::EvalOptions> OptionsFromArgs(const EvalArgs& a) {
  eval::EvalOptions o;
  o.world = a.world;
  o.gpus = a.gpus;
  o.trials = a.trials;
  o.timing_precision = a.timing_precision;
  o.timing_cap_s = a.timing_cap_s;
  o.candidate_budget_s = a.candidate_budget_s;
  o.timing = !a.no_timing;
  o.compile_only = a.compile_only;
  o.trusted = a.trusted;
  o.nccl_self_test = a.nccl_self_test;
  o.profile = a.profile;
  o.expert = !a.no_expert;
  o.cache_dir = a.cache_dir;
  o.arch = a.arch;
  o.bench_sizes = a.bench_sizes;
  o.dump_dir = a.dump_dir;
  // One evaluation: a candidate group started for a next one would never be used.
  o.warm_groups = false;
  if (!a.dump_dir.empty()) {
    std::error_code ec;
    if (std::filesystem::exists(a.dump_dir, ec) && !std::filesystem::is_empty(a.dump_dir, ec))
      return Error(ErrorKind::kInvalidInput,
                   "--dump " + a.dump_dir + ": the directory is not empty");
    std::filesystem::create_directories(a.dump_dir, ec);
    if (ec) return Error(ErrorKind::kIo, "--dump " + a.dump_dir + ": " + ec.message());
  }
  if (!a.dtype.empty()) {
    auto dt = eval::ParseDtype(a.dtype);
    if (!dt.ok()) return dt.status().WithContext("--dtype");
    o.dtype = *dt;
  }
  return o;
}

int RunEval(const EvalArgs& a) {
  std::filesystem::path dir = eval::TasksDir(a.tasks_dir);
  auto tasks = eval::LoadCheckedTasks(dir);
  if (!tasks.ok()) return FailWith("eval", tasks.status());
  auto selected = eval::SelectOneTask(*tasks, a.task, dir.string());
  if (!selected.ok()) return FailWith("eval", selected.status());
  const eval::Task* task = *selected;
  // A world size or dtype the task does not declare is a usage error, not an
  // evaluation (world 0: the evaluator picks from the visible GPUs).
  if (Status st = eval::CheckTaskProblem(*task, a.world, a.dtype); !st.ok())
    return FailWith("eval", st);
  auto source = ReadFile(a.kernel);
  if (!source.ok()) return FailWith("eval", source.status());
  auto options = OptionsFromArgs(a);
  if (!options.ok()) return FailWith("eval", options.status());
  eval::EvalOptions& o = *options;
  bool no_gpu = false;  // compile-only because there is no GPU, not because it was asked
  // Probed once: the evaluator is handed the card.
  std::optional<eval::HardwareCard> probed;
  if (!o.compile_only) {
    auto card = eval::ProbeHardware(o.gpus);
    if (card.ok()) {
      probed = *card;
    } else {
      no_gpu = true;
      std::fprintf(stderr,
                   "kforge eval: running a kernel needs a GPU (%s); compiling and checking the "
                   "policy only.\n",
                   card.status().message().c_str());
      o.compile_only = true;
    }
  }
  auto evaluator = eval::MakeEvaluator({}, probed);
  auto doc =
      evaluator->Evaluate(*task, *source, std::filesystem::path(a.kernel).filename().string(), o);
  if (!doc.ok()) {
    std::fprintf(stderr, "kforge eval: %s\n", doc.status().ToString().c_str());
    return kExitHarnessError;
  }
  // `--json -`: the document alone on stdout, as in every other command.
  const bool json_stdout = a.json_out == "-";
  if (!json_stdout) std::cout << eval::RenderEvalReport(*doc) << std::flush;
  if (!a.json_out.empty()) {
    if (Status s = WriteJson(a.json_out, *doc); !s.ok()) return FailWith("eval", s);
  }
  Result<EvalSummary> summary = ReadEvalSummary(*doc);
  if (!summary.ok()) {
    std::fprintf(stderr, "kforge eval: %s\n", summary.status().ToString().c_str());
    return kExitHarnessError;
  }
  if (summary->verdict == Verdict::kCompiled && no_gpu) {
    // Not a pass: nothing ran. A script reading the exit status must not
    // take a machine without a GPU for a correct kernel.
    std::fprintf(json_stdout ? stderr : stdout,
                 "verdict   NOT EVALUATED: the kernel compiled and passed the policy check, but "
                 "no GPU ran it (exit %d)\n",
                 static_cast<int>(kExitNotEvaluated));
    return kExitNotEvaluated;
  }
  return ExitCodeForVerdict(summary->verdict);
}

void AddEval(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "evaluate a kernel against a task's baseline");
  cmd->add_option("--task", args->task, "task key, number or name")->required();
  cmd->add_option("--kernel", args->kernel, "the kernel's .cu file")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--world", args->world,
                  "ranks (default: every visible GPU, at least the task's minimum)");
  cmd->add_option("--gpus", args->gpus, "GPUs to use, e.g. 0,1,2,3")->delimiter(',');
  cmd->add_option("--dtype", args->dtype, "the task's T (default: its first dtype)");
  cmd->add_option("--trials", args->trials, "correctness trials per check size")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--bench-size", args->bench_sizes, "only these bench sizes (labels)");
  cmd->add_option("--timing-precision", args->timing_precision,
                  "time each bench size until its median's 95% interval is within this fraction")
      ->check(CLI::Range(0.0001, 0.5))
      ->capture_default_str();
  cmd->add_option("--timing-cap", args->timing_cap_s,
                  "wall seconds at most per bench size and side (baseline, candidate)")
      ->check(CLI::Range(eval::kMinTimingCapS, eval::kMaxTimingCapS))
      ->capture_default_str();
  cmd->add_option("--candidate-budget", args->candidate_budget_s,
                  "wall seconds the kernel's own calls may take over the whole evaluation "
                  "(kf_setup, correctness and timed calls); past it, a timeout")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  cmd->add_flag("--no-timing", args->no_timing, "correctness only");
  cmd->add_flag("--profile", args->profile,
                "after the timed calls of the last bench size, read rank 0's hardware counters "
                "over a few more (CUPTI): DRAM bytes and throughput, occupancy, L2 hit rate, "
                "where warps stall; advice, never part of the verdict")
      ->excludes("--no-timing");
  cmd->add_flag("--no-expert", args->no_expert,
                "do not time the task's expert kernel (the best known human kernel) beside the "
                "baseline");
  cmd->add_flag("--trusted", args->trusted,
                "the kernel is the task's own reference: skip the policy check");
  cmd->add_flag("--compile-only", args->compile_only, "compile and check the policy; run nothing");
  cmd->add_flag("--nccl-self-test", args->nccl_self_test,
                "one rank on one GPU through the NCCL backend: checks every harness collective the "
                "kernel calls against the oracle (never timed; W=1 is no benchmark world size)")
      ->excludes("--world");
  cmd->add_option("--json", args->json_out,
                  "also write the result document to FILE, or to stdout instead of the report "
                  "with -");
  cmd->add_option("--dump", args->dump_dir,
                  "write one check trial's inputs, outputs and expected outputs per size and rank "
                  "here (.npy + manifest.json)");
  cmd->add_option("--tasks-dir", args->tasks_dir, "where tasks live");
  cmd->add_option("--cache-dir", args->cache_dir, "compile cache (default ~/.cache/kforge)");
  cmd->add_option("--arch", args->arch, "nvcc arch, e.g. sm_90a (default: the GPU's)");
  cmd->callback([args, &exit_code] { exit_code = RunEval(*args); });
}

KF_COMMAND("eval", AddEval);

}  // namespace
}  // namespace kforge::cli
