// The task's expert kernel ([expert], docs/tasks.md): the best known human
// kernel, timed after the candidate has gone and after the baseline's last
// block, in a trusted group of its own driven exactly like the reference and
// the candidate, so that each timing entry gives the speedup over it too
// (docs/methodology.md, "Expert"). Its timing is reused with the baseline's;
// whatever goes wrong with it only skips it: a verdict never depends on it.
#include "run/expert.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

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

// The baseline a plan ends with (a confirmed record or timed now).
TimingStats BaselineNow(const SizePlan& plan) {
  return Summarize(plan.baseline.side.claimed_us, plan.baseline.side.wall_us,
                   plan.baseline.side.blocks);
}

}  // namespace

// A record stands where this evaluation's baseline is within kExpertRescaleLimit of
// the one it was timed beside: its times are then taken in the proportion of
// the two baselines (1 where the baseline is that same confirmed record),
// which holds where the machine's level moves the reference and the expert
// alike, and its interval widened by the ratio's own. Further apart, the
// expert is timed again beside this baseline.
int ReuseExperts(EvalSession& s, const fs::path& object) {
  int to_time = 0;
  for (SizePlan& plan : s.plans) {
    if (plan.check || plan.baseline.side.claimed_us.empty()) continue;
    BaselineRecord* r =
        s.baselines != nullptr && s.options->baseline_reuse_s > 0
            ? s.baselines->Find(BaselineCache::Key(s, plan, object), s.options->baseline_reuse_s)
            : nullptr;
    const TimingStats now = BaselineNow(plan);
    const double scale = r != nullptr && r->beside_median_us > 0 && now.median_us > 0
                             ? now.median_us / r->beside_median_us
                             : 0;
    if (scale <= 0 || std::abs(scale - 1) > kExpertRescaleLimit) {
      ++to_time;
      continue;
    }
    plan.expert = ExpertTiming{};
    plan.expert.side = r->timing.side;
    for (auto* values : {&plan.expert.side.claimed_us, &plan.expert.side.wall_us})
      for (double& v : *values) v *= scale;
    plan.expert.scale = scale;
    // The ratio's interval: each baseline's interval at the far end.
    plan.expert.scale_lo = r->beside_ci_hi_us > 0 ? now.ci_lo_us / r->beside_ci_hi_us : scale;
    plan.expert.scale_hi = r->beside_ci_lo_us > 0 ? now.ci_hi_us / r->beside_ci_lo_us : scale;
    if (plan.BaselineReused() && scale == 1) plan.expert.scale_lo = plan.expert.scale_hi = 1;
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
    const TimingStats beside = BaselineNow(plan);
    BaselineRecord r;
    r.timing.side = plan.expert.side;
    r.measured = std::chrono::steady_clock::now();
    r.beside_median_us = beside.median_us;
    r.beside_ci_lo_us = beside.ci_lo_us;
    r.beside_ci_hi_us = beside.ci_hi_us;
    s.baselines->Store(BaselineCache::Key(s, plan, object), std::move(r));
  }
}

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
  const ExpertTiming& x = plan.expert;
  if (x.side.claimed_us.empty()) return nullptr;
  TimingStats e = Summarize(x.side.claimed_us, x.side.wall_us, x.side.blocks);
  // A rescaled record: its interval also carries the ratio's.
  if (x.scale > 0) {
    e.ci_lo_us *= std::min(1.0, x.scale_lo / x.scale);
    e.ci_hi_us *= std::max(1.0, x.scale_hi / x.scale);
  }
  json j = e.ToJson();
  // The candidate over the expert: > 1 where the model's kernel beats it.
  j["speedup"] = cand.median_us > 0 ? e.median_us / cand.median_us : 0;
  j["speedup_ci95"] = {cand.ci_hi_us > 0 ? e.ci_lo_us / cand.ci_hi_us : 0,
                       cand.ci_lo_us > 0 ? e.ci_hi_us / cand.ci_lo_us : 0};
  // The expert over the reference: how much room the task leaves.
  j["over_baseline"] = e.median_us > 0 ? base.median_us / e.median_us : 0;
  j["reused_age_s"] = x.reused_age_s >= 0 ? json(x.reused_age_s) : json(nullptr);
  j["rescaled_by"] = x.reused_age_s >= 0 && x.scale != 1 ? json(x.scale) : json(nullptr);
  return j;
}

}  // namespace kforge::eval
