// The unit the metrics count: one session (one model's attempt at one task
// with one strategy and sample index), reduced to its outcome.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/results/store.h"

namespace kforge::results {

struct SampleOutcome {
  std::string run;  // run name
  std::filesystem::path run_dir;
  int64_t session_id = 0;
  std::string model, strategy, task, category, dtype;
  int world = 0;
  int sample = 0;
  std::string state;       // session state
  bool evaluated = false;  // at least one evaluation exists
  // From the session's best evaluation: the one SetBestEvaluation named, else
  // the fastest passed one, else the last one.
  int64_t best_evaluation_id = 0;
  std::optional<Verdict> verdict;  // the best evaluation's (none when nothing evaluated)
  bool correct = false;            // verdict == kPassed
  std::optional<double> speedup;   // only when correct and timed
  // Only when correct and the task's expert kernel was timed beside it: its
  // speed over the expert's (>= 1: at human parity or better).
  std::optional<double> expert_speedup;
  bool emulated = false;  // any of the session's evaluations ran emulated
  int turns = 0;
  int64_t tokens = 0;  // input + output over every turn
  double cost_usd = 0;
  double wall_s = 0;            // model latency plus evaluation time, summed over turns
  std::string best_kernel_sha;  // kernel of the best evaluation's turn
  // Nothing judged this session's work: the model was never reached, the
  // evaluator failed, a kernel compiled but never ran on a GPU (no GPU), or a
  // budget or the deadline stopped the session before any evaluation.
  // Such a sample is left out of every correctness and speed figure and
  // named instead (docs/results.md, "Not evaluated").
  bool not_evaluated = false;
  std::string not_evaluated_reason;  // the stop reason, or why nothing was judged
  bool compiled_only = false;        // not evaluated, but its kernels compiled: no GPU judged them
};

// The stop reasons of a limit the researcher set, as the agent writes them
// (agent/src/budget.cc, agent/src/runner.cc): "budget: run spent $0.0361 of
// $0.0100", "deadline reached".
inline constexpr std::string_view kBudgetStopPrefix = "budget: ";
inline constexpr std::string_view kDeadlineStopReason = "deadline reached";
// True when a budget or the deadline stopped the session, not its own course.
bool StoppedByLimit(std::string_view stop_reason);

// The rule for SampleOutcome::not_evaluated, from what the store holds: no
// evaluation passed, and either nothing was judged (no evaluation with a
// verdict and no turn whose reply held no kernel) or a kernel compiled and
// never reached a GPU. `verdicts` are the session's evaluations'.
// `stopped_by_limit` (StoppedByLimit of a stopped session): a budget or the
// deadline cut the session short, so only an evaluation's verdict counts; a
// reply without a kernel alone does not make it a wrong answer.
bool NotEvaluated(const std::vector<Verdict>& verdicts, int no_kernel_turns,
                  bool compiled_unevaluated, bool stopped_by_limit = false);

// Every counted session of every run in one store. A session counts once it
// is finished (done/stopped) or has an evaluation; pending and running
// sessions without an evaluation are left out, so a live run is not
// penalised for work not yet done.
Result<std::vector<SampleOutcome>> LoadSamples(const RunStore& store);

// `arg` is a run directory (holding store.sqlite) or a run name under
// `runs_root`. The error names both places looked at.
Result<std::filesystem::path> ResolveRunDir(const std::string& arg,
                                            const std::filesystem::path& runs_root);
// Every directory under runs_root holding a store, sorted by name.
std::vector<std::filesystem::path> ListRunDirs(const std::filesystem::path& runs_root);
// Loads several run directories (opened read-only) into one list.
Result<std::vector<SampleOutcome>> LoadRunDirs(const std::vector<std::filesystem::path>& dirs);

}  // namespace kforge::results
