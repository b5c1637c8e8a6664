#include "kforge/results/samples.h"

#include <algorithm>
#include <map>
#include <set>
#include <system_error>

namespace kforge::results {

namespace fs = std::filesystem;

namespace {

// Picks the evaluation that stands for the session when none was named.
const EvaluationRecord* FallbackBest(const std::vector<const EvaluationRecord*>& evals) {
  const EvaluationRecord* best = nullptr;
  for (const auto* e : evals) {
    if (e->verdict != Verdict::kPassed) continue;
    if (!best || e->speedup.value_or(0) > best->speedup.value_or(0)) best = e;
  }
  if (!best && !evals.empty()) best = evals.back();
  return best;
}

}  // namespace

bool StoppedByLimit(std::string_view stop_reason) {
  return stop_reason.starts_with(kBudgetStopPrefix) || stop_reason == kDeadlineStopReason;
}

bool NotEvaluated(const std::vector<Verdict>& verdicts, int no_kernel_turns,
                  bool compiled_unevaluated, bool stopped_by_limit) {
  bool judged = no_kernel_turns > 0 && !stopped_by_limit, gpu = false;
  for (Verdict v : verdicts) {
    if (v == Verdict::kPassed) return false;
    judged = judged || JudgesTheKernel(v);
    gpu = gpu || CameFromAGpu(v);
  }
  return !judged || (compiled_unevaluated && !gpu);
}

Result<std::vector<SampleOutcome>> LoadSamples(const RunStore& store) {
  std::vector<SampleOutcome> out;
  KF_ASSIGN_OR_RETURN(std::vector<RunInfo> runs, store.ListRuns());
  for (const RunInfo& run : runs) {
    KF_ASSIGN_OR_RETURN(std::vector<SessionRecord> sessions, store.ListSessions(run.id));
    KF_ASSIGN_OR_RETURN(std::vector<EvaluationRecord> evals, store.ListRunEvaluations(run.id));
    KF_ASSIGN_OR_RETURN(std::vector<SessionUsage> usage, store.ListSessionUsage(run.id));
    std::map<int64_t, std::vector<const EvaluationRecord*>> by_session;
    for (const auto& e : evals) by_session[e.session_id].push_back(&e);
    std::map<int64_t, const SessionUsage*> usage_by_session;
    for (const auto& u : usage) usage_by_session[u.session_id] = &u;
    // "compiled" events (named after the verdict): a kernel compiled and was
    // not run (compile-only runs).
    KF_ASSIGN_OR_RETURN(std::vector<EventRecord> events, store.ListEvents(run.id));
    std::set<int64_t> compiled;
    for (const auto& e : events) {
      if (e.kind == VerdictName(Verdict::kCompiled) && e.detail.is_object() &&
          e.detail.contains("session") && e.detail["session"].is_number_integer())
        compiled.insert(e.detail["session"].get<int64_t>());
    }
    for (const SessionRecord& s : sessions) {
      const auto& mine = by_session[s.id];
      const bool finished = s.state == "done" || s.state == "stopped";
      if (mine.empty() && !finished) continue;
      SampleOutcome o;
      o.run = run.name;
      o.run_dir = store.dir();
      o.session_id = s.id;
      o.model = s.key.model;
      o.strategy = s.key.strategy;
      o.task = s.key.task;
      o.category = s.key.category.empty() ? "uncategorised" : s.key.category;
      o.dtype = s.key.dtype;
      o.world = s.key.world;
      o.sample = s.key.sample;
      o.state = s.state;
      o.evaluated = !mine.empty();
      const EvaluationRecord* best = nullptr;
      for (const auto* e : mine) {
        if (s.best_evaluation_id && e->id == *s.best_evaluation_id) best = e;
        o.emulated = o.emulated || e->emulated;
        o.wall_s += e->seconds;
      }
      if (!best) best = FallbackBest(mine);
      if (best) {
        o.best_evaluation_id = best->id;
        o.verdict = best->verdict;
        o.correct = best->verdict == Verdict::kPassed;
        if (o.correct) {
          o.speedup = best->speedup;
          o.expert_speedup = best->expert_speedup;
        }
      }
      if (auto it = usage_by_session.find(s.id); it != usage_by_session.end()) {
        o.turns = it->second->turns;
        o.tokens = it->second->input_tokens + it->second->output_tokens;
        o.cost_usd = it->second->cost_usd;
        o.wall_s += it->second->latency_s;
      }
      if (best) o.best_kernel_sha = best->kernel_sha;
      std::vector<Verdict> verdicts;
      for (const auto* e : mine) verdicts.push_back(e->verdict);
      const auto u = usage_by_session.find(s.id);
      const int no_kernel = u == usage_by_session.end() ? 0 : u->second->no_kernel_turns;
      o.not_evaluated = NotEvaluated(verdicts, no_kernel, compiled.count(s.id) > 0,
                                     s.state == "stopped" && StoppedByLimit(s.stop_reason));
      o.compiled_only = o.not_evaluated && compiled.count(s.id) > 0;
      if (o.not_evaluated) {
        if (!s.stop_reason.empty()) {
          o.not_evaluated_reason = s.stop_reason;
        } else if (compiled.count(s.id)) {
          o.not_evaluated_reason = "compiled; evaluation needs a GPU";
        } else {
          o.not_evaluated_reason = o.turns == 0 ? "the model was never reached" : "nothing judged";
        }
      }
      out.push_back(std::move(o));
    }
  }
  return out;
}

Result<fs::path> ResolveRunDir(const std::string& arg, const fs::path& runs_root) {
  std::error_code ec;
  if (fs::exists(StorePath(arg), ec)) return fs::path(arg);
  if (fs::exists(StorePath(runs_root / arg), ec)) return runs_root / arg;
  return Error(ErrorKind::kNotFound, "no run \"" + arg + "\": neither " + StorePath(arg).string() +
                                         " nor " + StorePath(runs_root / arg).string() + " exists");
}

std::vector<fs::path> ListRunDirs(const fs::path& runs_root) {
  std::vector<fs::path> dirs;
  std::error_code ec;
  for (fs::directory_iterator it(runs_root, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec) && fs::exists(StorePath(it->path()), ec)) dirs.push_back(it->path());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

Result<std::vector<SampleOutcome>> LoadRunDirs(const std::vector<fs::path>& dirs) {
  std::vector<SampleOutcome> all;
  for (const auto& dir : dirs) {
    KF_ASSIGN_OR_RETURN(auto store, RunStore::Open(dir, /*read_only=*/true));
    auto samples = LoadSamples(*store);
    if (!samples.ok()) return samples.status().WithContext(dir.string());
    all.insert(all.end(), std::make_move_iterator(samples->begin()),
               std::make_move_iterator(samples->end()));
  }
  return all;
}

}  // namespace kforge::results
