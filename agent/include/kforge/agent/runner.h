// The run: every (model, task, repeat) session of a run advanced together on
// the scheduler's pools, every step committed to the store before the next
// begins. Running a run that the store already holds resumes it: each
// session is rebuilt from its stored turns and evaluations and continues;
// sessions stored as done do no more work.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kforge/agent/budget.h"
#include "kforge/agent/ports.h"
#include "kforge/agent/progress.h"
#include "kforge/agent/prompt.h"
#include "kforge/agent/scheduler.h"
#include "kforge/agent/strategy.h"
#include "kforge/core/clock.h"
#include "kforge/core/status.h"

namespace kforge::agent {

struct RunTask {
  std::string key;  // "001_allreduce"
  std::string category;
  Prompt prompt;  // built for the run's world and dtype
  // The dtype its sessions are stored under, resolved (the task's default
  // when the run names none); empty falls back to RunSpec::dtype.
  std::string dtype;
};

struct RunSpec {
  std::string name;
  std::vector<std::string> models;
  std::vector<RunTask> tasks;
  const Strategy* strategy = nullptr;  // turns/samples already overridden as the run asks
  int repeats = 1;                     // independent sessions per (model, task)
  int world = 2;
  std::string dtype;          // empty: the task's default
  bool compile_only = false;  // no GPU: stop each session once a kernel compiles
  // Every GPU evaluation profiles, as the strategy's `profile` would
  // (RunConfig::profile: `kforge run --profile`).
  bool profile = false;
  // Every GPU evaluation's timing cap (RunConfig::timing_cap_s; 0: the evaluator's).
  double timing_cap_s = 0;
  Budgets budgets;
  std::optional<double> deadline_unix;  // no new model calls after this
  PoolLimits pools;
  nlohmann::json config = nlohmann::json::object();    // stored with the run
  std::string task_suite_hash;                         // eval::TaskSuiteHash of the tasks
  nlohmann::json hardware = nlohmann::json::object();  // the hardware card
  double link_peak_gbps = 0;
  int max_llm_attempts = 4;     // per call, for failures that may pass
  double retry_backoff_s = 20;  // doubled per attempt
  // A provider's Retry-After is a minimum: the wait is the larger of it and
  // the backoff, but never more than this (a provider asking for hours is
  // capped, and the event says so).
  double max_retry_wait_s = 1800;
  // An evaluation whose slot was lost (ErrorKind::kSlotLost: a remote server
  // died mid-job, drained, was unreachable or full) is requeued on another
  // slot, each time recorded as an `eval_requeued` event; after this many
  // attempts in all it is abandoned (`eval_abandoned`) and its session stops
  // as a harness failure: never counted against the kernel, and left
  // unevaluated so that a resume evaluates it.
  int max_eval_attempts = 4;
  // A lost slot takes no work for this long, doubled for each loss in a row
  // (a Retry-After the server sent is a minimum), up to max_slot_cooldown_s.
  double slot_cooldown_s = 15;
  double max_slot_cooldown_s = 600;
  // A red-team run's canary (MakeCanary in breach.h; empty: none). With a
  // red-team strategy every evaluation, and every reply without a kernel, is
  // checked for a breach; each is a `redteam_breach` event.
  std::string canary;
};

struct RunDeps {
  LlmPort* llm = nullptr;
  std::vector<EvalPort*> gpu_sets;   // one per GPU set (PoolLimits::gpu_sets of them)
  std::vector<EvalPort*> compilers;  // one per compile slot
  // Names each slot in events (e.g. "URL (gpu slot 0)"); optional, by index.
  std::vector<std::string> gpu_set_names, compiler_names;
  // Slots with the same group (a remote server's URL), in either pool, are
  // lost together: when one loses its job, all of them rest. Optional, by
  // index; a slot without a group is on its own.
  std::vector<std::string> gpu_set_groups, compiler_groups;
  StorePort* store = nullptr;
  Clock* clock = nullptr;
  Executor* executor = nullptr;
  ProgressView* progress = nullptr;  // optional
};

struct SessionSummary {
  std::string model, task;
  int sample = 0;
  std::string state, stop_reason;
  std::string best_outcome;  // of the best candidate; empty when no turn finished
  double best_speedup = 0;
  int turns = 0;
  // Nothing judged the model's work (never reached, evaluator failure, or a
  // kernel compiled without a GPU): the same rule as results' SampleOutcome.
  bool not_evaluated = false;
  // Stopped by an error that is not the model's work (provider or harness),
  // not by a budget, deadline or stop rule.
  bool failed = false;
};

struct RunSummary {
  int64_t run_id = 0;
  std::string name;
  RunStats stats;
  std::vector<SessionSummary> sessions;
  double wall_s = 0;
  double gpu_busy_fraction = 0;  // busy seconds / (wall seconds x GPU sets)
  bool compile_only = false;
  // True when the run ended because a store write failed (nothing after the
  // failed write happened; resume continues from there).
  bool aborted = false;

  // True when there were sessions and every one of them failed (no model
  // reached, every evaluation a harness error): the run measured nothing.
  bool AllFailed() const;
};

// Runs (or resumes) the run to completion. A Status error means the store
// failed or the spec is unusable; the run is then resumable.
Result<RunSummary> ExecuteRun(const RunSpec& spec, const RunDeps& deps);

// The human summary printed at the end of `kforge run`.
std::string RenderRunSummary(const RunSummary& summary);

// The same as a "kforge.run_summary/1" document (`kforge run --json`; the
// schema is in docs/cli.md): per-model counters and one entry per session.
nlohmann::json RunSummaryJson(const RunSummary& summary);

}  // namespace kforge::agent
