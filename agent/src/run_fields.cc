#include "kforge/agent/run_fields.h"

#include <fmt/format.h>

#include <cmath>

namespace kforge::agent {
namespace {

using K = FieldKind;
using R = FieldRole;
using J = JsonWhen;
using C = RunConfig;

// One row per field reads better than one line per column.
// clang-format off
constexpr RunField kFields[] = {
    {.key = "name", .json_key = "name", .flag = "--name", .role = R::kName, .kind = K::kString,
     .member = &C::name, .json = J::kRequired, .help = "the run's name (default run-DATE-TIME)"},
    {.key = "models", .json_key = "models", .flag = "--models", .role = R::kSelects,
     .kind = K::kStrings, .member = &C::models, .json = J::kRequired,
     .help = "model specs, comma-separated (e.g. openai:gpt-5.5,anthropic:claude-opus-4-7)"},
    {.key = "tasks", .json_key = "tasks", .flag = "--tasks", .role = R::kSelects,
     .kind = K::kStrings, .member = &C::tasks, .json = J::kRequired,
     .help = "task selectors, comma-separated: keys, numbers, names, globs, categories"},
    {.key = "strategy", .json_key = "strategy", .flag = "--strategy", .role = R::kAsks,
     .kind = K::kString, .member = &C::strategy, .json = J::kRequired,
     .help = "strategy name or file (default refine)"},
    {.key = "turns", .json_key = "turns", .flag = "--turns", .role = R::kAsks,
     .kind = K::kOptionalInt, .member = &C::turns, .json = J::kWhenSet, .min = 1, .flag_max = 1000,
     .help = "override the strategy's turns"},
    {.key = "samples", .json_key = "samples", .flag = "--samples", .role = R::kAsks,
     .kind = K::kOptionalInt, .member = &C::samples, .json = J::kWhenSet, .min = 1,
     .flag_max = 1000, .help = "override the strategy's samples per turn"},
    {.key = "repeats", .json_key = "repeats", .flag = "--repeats", .role = R::kAsks,
     .kind = K::kInt, .member = &C::repeats, .min = 1, .flag_max = 1000,
     .help = "independent sessions per model and task"},
    {.key = "world", .json_key = "world", .flag = "--world", .role = R::kAsks, .kind = K::kInt,
     .member = &C::world, .min = 1, .flag_max = 64, .help = "world size W (default 2)"},
    {.key = "dtype", .json_key = "dtype", .flag = "--dtype", .role = R::kAsks, .kind = K::kString,
     .member = &C::dtype, .help = "the tasks' T (default: each task's first)"},
    {.key = "hardware", .json_key = "hardware", .flag = "--hardware", .role = R::kAsks,
     .kind = K::kString, .member = &C::hardware,
     .help = "hardware profile for the prompt instead of the probe"},
    {.key = "deadline", .json_key = "deadline_unix", .flag = "--deadline", .role = R::kLimits,
     .kind = K::kDeadline, .member = &C::deadline_unix, .json = J::kWhenSet,
     .help = "no new model calls after: YYYY-MM-DDTHH:MM, +8h, +90m"},
    {.key = "budget", .json_key = "budget", .flag = "--budget-*", .role = R::kLimits,
     .kind = K::kBudgets, .member = &C::budgets},
    {.key = "gpus", .json_key = "gpus", .flag = "--gpus", .role = R::kEvaluates, .kind = K::kGpus,
     .member = &C::gpus, .help = "GPUs to use, e.g. 0,1,2,3"},
    {.key = "compile_only", .json_key = "compile_only", .flag = "--compile-only",
     .role = R::kEvaluates, .kind = K::kBool, .member = &C::compile_only,
     .help = "compile and policy-check only (no GPU)"},
    {.key = "llm_concurrency", .json_key = "llm_concurrency", .flag = "--llm-concurrency",
     .role = R::kEvaluates, .kind = K::kInt, .member = &C::llm_concurrency, .min = 1,
     .flag_max = 1024, .help = "model calls in flight per model (default 4)"},
    {.key = "compile_jobs", .json_key = "compile_jobs", .flag = "--compile-jobs",
     .role = R::kEvaluates, .kind = K::kInt, .member = &C::compile_jobs, .min = 0, .flag_max = 1024,
     .help = "concurrent compiles (default or 0: the CPU cores the GPU evaluations leave)"},
    {.key = "baseline_reuse_s", .json_key = "baseline_reuse_s", .flag = "--baseline-reuse",
     .role = R::kEvaluates, .kind = K::kSeconds, .member = &C::baseline_reuse_s,
     .zero = "timed around every candidate",
     .help = "seconds a timed baseline is reused, confirmed each time (default 600; 0: time it "
             "around every candidate)"},
    {.key = "no_warm_groups", .json_key = "no_warm_groups", .flag = "--no-warm-groups",
     .role = R::kEvaluates, .kind = K::kBool, .member = &C::no_warm_groups,
     .help = "start each evaluation's served groups when it needs them, not after the previous "
             "evaluation of the same shape"},
    {.key = "profile", .json_key = "profile", .flag = "--profile", .role = R::kEvaluates,
     .kind = K::kBool, .member = &C::profile,
     .help = "profile every GPU evaluation (as kforge eval --profile), whatever the strategy says"},
    {.key = "timing_cap_s", .json_key = "timing_cap_s", .flag = "--timing-cap",
     .role = R::kEvaluates, .kind = K::kSeconds, .member = &C::timing_cap_s,
     .zero = "the evaluator's default (0.5 s)", .seconds_lo = eval::kMinTimingCapS,
     .seconds_hi = eval::kMaxTimingCapS,
     .help = "wall seconds at most per bench size and side, as kforge eval --timing-cap (default "
             "0: the evaluator's, 0.5; shorter is faster and less precise: docs/methodology.md)"},
    {.key = "tasks_dir", .json_key = "tasks_dir", .flag = "--tasks-dir", .role = R::kEvaluates,
     .kind = K::kString, .member = &C::tasks_dir, .help = "where tasks live"},
    {.key = "registry", .json_key = "registries", .flag = "--registry", .role = R::kEvaluates,
     .kind = K::kFiles, .member = &C::registries, .json = J::kWhenSet,
     .help = "extra model registry file(s), after ~/.config/kforge/models.toml"},
    {.key = "out", .json_key = "out", .flag = "--out", .role = R::kOut, .kind = K::kString,
     .member = &C::out, .help = "where run directories go (default runs)"},
    {.key = "evaluators", .json_key = "evaluators", .flag = "--evaluators", .role = R::kServers,
     .kind = K::kUrls, .member = &C::evaluators, .json = J::kWhenSet,
     .help = "evaluate on these eval-servers, comma-separated base URLs (docs/scale.md)"},
    {.key = "evaluators_dir", .json_key = "evaluators_dir", .flag = "--evaluators-dir",
     .role = R::kServers, .kind = K::kPath, .member = &C::evaluators_dir, .json = J::kWhenSet,
     .help = "evaluate on the eval-servers registered in this rendezvous directory"},
    // The token itself is never stored: only where it was read from.
    {.key = "eval_token_file", .json_key = "eval_token_file", .flag = "--eval-token-file",
     .role = R::kServers, .kind = K::kPath, .member = &C::eval_token_file, .json = J::kWhenSet,
     .help = "the eval-servers' bearer token (mode 0600; default $KFORGE_EVAL_TOKEN)"},
    {.key = "evaluator_liveness_s", .json_key = "evaluator_liveness_s",
     .flag = "--evaluator-liveness", .role = R::kServers, .kind = K::kSeconds,
     .member = &C::evaluator_liveness_s, .zero = "no health checks",
     .help = "requeue a job whose eval-server answered no health check for this many seconds "
             "(default 60; 0: wait for the job)"},
    {.key = "slurm", .json_key = "slurm", .flag = "--slurm*", .role = R::kServers,
     .kind = K::kSlurm, .member = {}, .json = J::kWhenSet},
    {.key = "", .json_key = "rejudge_of", .flag = "", .role = R::kProvenance, .kind = K::kRejudgeOf,
     .member = {}, .json = J::kWhenSet},
};
// clang-format on

// Each kind names the member type it reads and writes.
template <class T>
constexpr bool Holds(const RunField& f) {
  return std::holds_alternative<T C::*>(f.member);
}
constexpr bool MemberFitsKind(const RunField& f) {
  switch (f.kind) {
    case K::kString:
    case K::kPath:
      return Holds<std::string>(f);
    case K::kStrings:
    case K::kUrls:
    case K::kFiles:
      return Holds<std::vector<std::string>>(f);
    case K::kInt:
      return Holds<int>(f);
    case K::kOptionalInt:
      return Holds<std::optional<int>>(f);
    case K::kSeconds:
      return Holds<double>(f);
    case K::kBool:
      return Holds<bool>(f);
    case K::kGpus:
      return Holds<std::vector<int>>(f);
    case K::kDeadline:
      return Holds<std::optional<double>>(f);
    case K::kBudgets:
      return Holds<Budgets>(f);
    case K::kSlurm:
    case K::kRejudgeOf:
      return std::holds_alternative<std::monostate>(f.member);
  }
  return false;
}
constexpr bool EveryRowFitsItsKind() {
  for (const RunField& f : kFields) {
    if (!MemberFitsKind(f) || f.json_key.empty()) return false;
  }
  return true;
}
static_assert(EveryRowFitsItsKind(), "a row's member is not of its kind's type");

}  // namespace

bool AResumeMayChange(FieldRole role) {
  return role != R::kName && role != R::kSelects && role != R::kAsks;
}

bool ARejudgeTakes(FieldRole role) { return role != R::kAsks && role != R::kLimits; }

bool DifferencesCompare(FieldRole role) {
  return role != R::kName && role != R::kOut && role != R::kServers;
}

std::span<const RunField> RunFields() { return kFields; }

std::optional<std::string> SecondsRefused(const RunField& f, double v) {
  const bool bounded = f.seconds_lo > 0 || std::isfinite(f.seconds_hi);
  if (std::isfinite(v) && v >= 0 && (v == 0 || (v >= f.seconds_lo && v <= f.seconds_hi)))
    return std::nullopt;
  if (!bounded) return fmt::format("expected a number of seconds >= 0 (0: {})", f.zero);
  return fmt::format("expected 0 ({}) or {:g}-{:g} seconds", f.zero, f.seconds_lo, f.seconds_hi);
}

const RunField* FindRunField(std::string_view json_key) {
  for (const RunField& f : kFields) {
    if (f.json_key == json_key) return &f;
  }
  return nullptr;
}

void CopyField(const RunField& f, const RunConfig& from, RunConfig* to) {
  switch (f.kind) {
    case K::kSlurm:
      to->slurm_nodes = from.slurm_nodes;
      to->slurm_gpus_per_node = from.slurm_gpus_per_node;
      to->slurm_partition = from.slurm_partition;
      to->slurm_time = from.slurm_time;
      return;
    case K::kRejudgeOf:
      to->rejudge_of = from.rejudge_of;
      to->rejudge_of_store = from.rejudge_of_store;
      return;
    default:
      std::visit(
          [&](auto m) {
            if constexpr (!std::is_same_v<decltype(m), std::monostate>) to->*m = from.*m;
          },
          f.member);
  }
}

}  // namespace kforge::agent
