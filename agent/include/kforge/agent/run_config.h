// What `kforge run` was asked to do: from flags or a run file (TOML), stored
// with the run as JSON so that `--resume NAME` continues the same run. Each
// field has a row in kforge/agent/run_fields.h, which drives the run file,
// the JSON, the differences and the flags.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kforge/agent/budget.h"
#include "kforge/core/status.h"
#include "kforge/evaluator/evaluate.h"
#include "kforge/evaluator/service.h"

namespace kforge::agent {

struct RunConfig {
  std::string name;
  std::vector<std::string> models;
  std::vector<std::string>
      tasks;  // selectors: keys, numbers, names, globs, "category:X" or a category
  std::string strategy = "refine";
  std::optional<int> turns, samples;
  int repeats = 1;
  int world = 2;
  std::string dtype;
  std::vector<int> gpus;  // empty: every visible GPU
  std::string hardware;   // a profile name for the prompt instead of the probe
  bool compile_only = false;
  Budgets budgets;
  std::optional<double> deadline_unix;
  int llm_concurrency = 4;  // per model
  int compile_jobs = 0;     // 0: the CPU cores the GPU evaluations leave (agent/src/local_pools.cc)
  // A bench size's baseline is reused for this long by the evaluator that
  // timed it, confirmed by a short block each time (docs/methodology.md); 0:
  // timed around every candidate.
  double baseline_reuse_s = eval::kDefaultBaselineReuseS;
  // Each GPU set starts its evaluations' served groups (candidate,
  // reference, expert) when they need them, instead of after the previous evaluation of the same
  // shape (EvalOptions::warm_groups).
  bool no_warm_groups = false;
  // Every GPU evaluation of the run also profiles its kernel
  // (EvalOptions::profile, as `kforge eval --profile`), whatever the
  // strategy says; a rejudge with it gives every document a profile.
  bool profile = false;
  // > 0: each side of each bench size is timed for at most this many wall
  // seconds (EvalRequest::timing_cap_s, as `kforge eval --timing-cap`); 0:
  // the evaluator's default (0.5 s). Every timing entry records the rule it
  // was timed by (docs/eval-result.md).
  double timing_cap_s = 0;
  std::string out = "runs";  // runs/<name>/
  std::string tasks_dir;     // empty: the default tasks folder
  // Model registry files read after the built-in registry and the user's
  // $XDG_CONFIG_HOME/kforge/models.toml (--registry; a run file's `registry`).
  std::vector<std::string> registries;
  // Remote evaluation (docs/scale.md): eval-server base URLs, and/or a
  // rendezvous directory whose registrations name servers. The token comes
  // from eval_token_file or $KFORGE_EVAL_TOKEN and is never stored.
  std::vector<std::string> evaluators;
  std::string evaluators_dir;
  std::string eval_token_file;
  // A job whose server has answered no health check for this long is
  // requeued on another server; 0: wait for the job's own timeout.
  double evaluator_liveness_s = eval::kDefaultEvaluatorLivenessS;
  // `kforge run --slurm` / a run file's [slurm] table: start eval-servers
  // through Slurm around the run (slurm_nodes > 0 means on).
  int slurm_nodes = 0;
  int slurm_gpus_per_node = 0;
  std::string slurm_partition, slurm_time;
  // A rejudge (`kforge run --rejudge RUN`, agent/rejudge.h): the run whose
  // recorded turns this run judges again, and the store it was read from.
  // Empty for a run that asks models.
  std::string rejudge_of, rejudge_of_store;

  bool operator==(const RunConfig&) const = default;
};

// Reads a run file. Errors name the file, the line and the field.
Result<RunConfig> ParseRunFile(std::string_view toml_text, const std::filesystem::path& origin);
Result<RunConfig> LoadRunFile(const std::filesystem::path& path);

nlohmann::json RunConfigToJson(const RunConfig& c);
Result<RunConfig> RunConfigFromJson(const nlohmann::json& j);

// What a new invocation asks differently from a stored run's config, one
// "field: stored -> asked" line per field (name and out are not compared).
// Empty when they ask the same.
std::vector<std::string> RunConfigDifferences(const RunConfig& stored, const RunConfig& asked);

// A deadline as unix seconds, from one of
//   "2025-06-01T08:00[:SS]"         local time (a space may stand for the T)
//   "2025-06-01T08:00Z", "...+02:00", "...-0530"   that time in that zone (RFC 3339)
//   "+8h", "+90m", "+3600s", "+1.5h" from `now_unix`
//   "1700000000"                    unix seconds
// Anything else, trailing text included, is kInvalidInput naming the part
// that was not understood.
Result<double> ParseDeadline(const std::string& text, double now_unix);

}  // namespace kforge::agent
