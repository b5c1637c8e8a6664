// `kforge run --rejudge RUN`: a stored run's kernels judged again by this
// machine's evaluator, into a new run, without calling any model.
//
// The new run mirrors the original: the same sessions (model, task,
// strategy, sample, world, dtype), the same turns (index, prompt, reply,
// kernel, the feedback the model read, the token usage and cost the provider
// reported: those describe the answers, and nothing is billed again), and
// the original's session states. What is new is every evaluation: each
// turn's kernel is compiled and (unless compile-only) evaluated on a GPU set,
// whatever the original's verdict was and whether or not its strategy would
// have stopped earlier. The original run is only read.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kforge/agent/ports.h"
#include "kforge/agent/runner.h"
#include "kforge/agent/scheduler.h"
#include "kforge/core/status.h"

namespace kforge::agent {

// One session of the original run, as stored.
struct StoredSession {
  SessionRecord row;              // its id is the original store's
  std::vector<TurnRecord> turns;  // in index order; ids and times left for the new store
};

struct RejudgeSpec {
  std::string name;                     // the new run's
  std::vector<StoredSession> sessions;  // the original's, filtered as asked
  bool compile_only = false;            // no GPU: compile and policy-check only
  bool profile = false;                 // every GPU evaluation profiles (RunConfig::profile)
  double timing_cap_s = 0;              // every GPU evaluation's (RunConfig::timing_cap_s)
  // The rejudge of a red-team run (one that planted a canary): a canary of its
  // own, planted in every evaluation (EvalJob::canary) and looked for, with
  // the other breach reasons, in every document (a `redteam_breach` event,
  // docs/integrity.md). The replies are the original's, so only the documents
  // are read. Empty: not a red-team run.
  std::string canary;
  PoolLimits pools;                                    // compile_slots and gpu_sets
  nlohmann::json config = nlohmann::json::object();    // stored with the new run
  std::string task_suite_hash;                         // of the tasks it is judged on
  nlohmann::json hardware = nlohmann::json::object();  // this machine's card
  int max_eval_attempts = 4;  // an evaluation whose slot was lost is requeued this often
  double slot_cooldown_s = 15;
};

// Copies the sessions and turns the new run does not hold yet (so a rejudge
// that was interrupted continues where it stopped: --resume), then evaluates
// every turn with a kernel and no evaluation. The summary is a run summary
// (RenderRunSummary / RunSummaryJson). Only gpu_sets, compilers, store,
// clock, executor and progress of `deps` are used: a rejudge has no model.
Result<RunSummary> ExecuteRejudge(const RejudgeSpec& spec, const RunDeps& deps);

}  // namespace kforge::agent
