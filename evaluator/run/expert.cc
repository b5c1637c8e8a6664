// The task's expert kernel ([expert], docs/tasks.md): the best known human
// kernel, timed after the candidate has gone and after the baseline's last
// block, in a trusted group of its own driven exactly like the reference and
// the candidate, so that each timing entry gives the speedup over it too
// (docs/methodology.md, "Expert"). Its timing is reused with the baseline's;
// whatever goes wrong with it only skips it: a verdict never depends on it.
#include "run/expert.h"

#include <fmt/format.h>

#include "kforge/core/log.h"
#include "run/baseline_cache.h"
#include "run/stats.h"

namespace kforge::eval {

using nlohmann::json;
namespace fs = std::filesystem;

json ExpertStatement(const Task& task) {
  if (!task.expert) return nullptr;
  if (!task.expert->none.empty()) return {{"none", task.expert->none}};
  return {{"kernel", fs::relative(task.expert->kernel, task.dir).generic_string()},
          {"technique", task.expert->technique}};
}

bool ExpertToTime(const Task& task, const EvalOptions& options) {
  return options.expert && options.timing && !options.compile_only && !options.nccl_self_test &&
         task.expert && !task.expert->kernel.empty();
}

namespace {

// Bench plans with a timed baseline and no expert record to reuse: a record
// stands only where this evaluation's baseline is itself a confirmed reuse
// (the GPU is as it was when both were timed).
int ReuseExperts(EvalSession& s, const fs::path& object) {
  int to_time = 0;
  for (SizePlan& plan : s.plans) {
    if (plan.check || plan.baseline.side.claimed_us.empty()) continue;
    BaselineRecord* r =
        s.baselines != nullptr && s.options->baseline_reuse_s > 0 && plan.BaselineReused()
            ? s.baselines->Find(BaselineCache::Key(s, plan, object), s.options->baseline_reuse_s)
            : nullptr;
    if (r == nullptr) {
      ++to_time;
      continue;
    }
    plan.expert.side = r->timing.side;
    plan.expert.reused_age_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - r->measured).count();
    ++r->uses;
  }
  return to_time;
}

void RecordExperts(EvalSession& s, const fs::path& object) {
  if (s.baselines == nullptr || s.options->baseline_reuse_s <= 0) return;
  for (const SizePlan& plan : s.plans) {
    if (plan.check || plan.expert.reused_age_s >= 0 || plan.expert.side.claimed_us.empty())
      continue;
    BaselineRecord r;
    r.timing.side = plan.expert.side;
    r.measured = std::chrono::steady_clock::now();
    s.baselines->Store(BaselineCache::Key(s, plan, object), std::move(r));
  }
}

}  // namespace

void TimeExpert(EvalSession& s, const ExpertObject& expert) {
  if (s.expert_report.is_null() || !s.expert_report.contains("kernel")) return;
  auto skip = [&](const std::string& why) {
    s.expert_report["skipped"] = why;
    LogWarn("evaluator", "{}: the expert kernel was not timed: {}", s.task->key, why);
  };
  if (!expert.error.empty()) return skip(expert.error);
  if (ReuseExperts(s, expert.object) == 0) {
    s.expert_report["reused"] = true;
    return;
  }
  // The expert's failures are kforge's and skip it: the evaluation's own
  // failure, checks and findings stay as the candidate left them.
  const json failure = s.failure;
  Status st = StartServed(s, s.expert, expert.object);
  if (st.ok()) st = TimeExpertSides(s);
  StopServed(s, s.expert);
  s.failure = failure;
  if (!st.ok()) {
    for (SizePlan& plan : s.plans) plan.expert = ExpertTiming{};
    return skip(st.message());
  }
  RecordExperts(s, expert.object);
}

json ExpertEntry(const SizePlan& plan, const TimingStats& base, const TimingStats& cand) {
  if (plan.expert.side.claimed_us.empty()) return nullptr;
  const TimingStats e =
      Summarize(plan.expert.side.claimed_us, plan.expert.side.wall_us, plan.expert.side.blocks);
  json j = e.ToJson();
  // The candidate over the expert: > 1 where the model's kernel beats it.
  j["speedup"] = cand.median_us > 0 ? e.median_us / cand.median_us : 0;
  j["speedup_ci95"] = {cand.ci_hi_us > 0 ? e.ci_lo_us / cand.ci_hi_us : 0,
                       cand.ci_lo_us > 0 ? e.ci_hi_us / cand.ci_lo_us : 0};
  // The expert over the reference: how much room the task leaves.
  j["over_baseline"] = e.median_us > 0 ? base.median_us / e.median_us : 0;
  j["reused_age_s"] =
      plan.expert.reused_age_s >= 0 ? json(plan.expert.reused_age_s) : json(nullptr);
  return j;
}

}  // namespace kforge::eval
