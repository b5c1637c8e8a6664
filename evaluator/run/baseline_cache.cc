#include "run/baseline_cache.h"

#include <fmt/format.h>

#include <cmath>

#include "kforge/core/log.h"
#include "kforge/core/stats.h"
#include "protocol/problem_wire.h"

namespace kforge::eval {

std::string BaselineCache::Key(const EvalSession& s, const SizePlan& plan) {
  return Key(s, plan, s.reference_object);
}

std::string BaselineCache::Key(const EvalSession& s, const SizePlan& plan,
                               const std::filesystem::path& object) {
  std::string devices;
  for (int d : s.devices) devices += fmt::format("{},", d);
  return fmt::format("{}|{}|W{}|{}|gpus {}|emulated {}|sets {}|rule {} {}|{}", s.task->key,
                     object.string(), s.world, DtypeName(s.dtype), devices, s.emulated, plan.sets,
                     s.options->timing_precision, s.options->timing_cap_s,
                     proto::ProblemToJson(plan.problem).dump());
}

BaselineRecord* BaselineCache::Find(const std::string& key, double max_age_s) {
  auto it = records_.find(key);
  if (it == records_.end()) return nullptr;
  const double age =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second.measured).count();
  if (age > max_age_s) {
    records_.erase(it);
    return nullptr;
  }
  return &it->second;
}

void BaselineCache::Store(const std::string& key, BaselineRecord record) {
  records_[key] = std::move(record);
}

int ReuseBaselines(EvalSession& s) {
  int to_time = 0;
  for (SizePlan& plan : s.plans) {
    if (plan.check) continue;
    BaselineRecord* r =
        s.baselines != nullptr && s.options->baseline_reuse_s > 0
            ? s.baselines->Find(BaselineCache::Key(s, plan), s.options->baseline_reuse_s)
            : nullptr;
    if (r == nullptr) {
      ++to_time;
      continue;
    }
    plan.baseline = r->timing;
    plan.reused_baseline_age_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - r->measured).count();
    plan.reused_baseline_uses = ++r->uses;
  }
  return to_time;
}

int DropStaleBaselines(EvalSession& s) {
  constexpr double kClockChange = 0.03;
  int dropped = 0;
  for (SizePlan& plan : s.plans) {
    if (!plan.BaselineReused() || plan.baseline.side.sm_clock_mhz.empty() ||
        plan.candidate.sm_clock_mhz.empty())
      continue;
    const double then = Quantile(plan.baseline.side.sm_clock_mhz, 0.5);
    const double now = Quantile(plan.candidate.sm_clock_mhz, 0.5);
    if (then > 0 && std::abs(now / then - 1) <= kClockChange) continue;
    LogInfo("evaluator",
            "size {}: the SM clock was {:.0f} MHz when the reused baseline was timed and {:.0f} "
            "MHz for the candidate; timing the baseline again",
            plan.size.label, then, now);
    plan.DropReusedBaseline();
    ++dropped;
  }
  return dropped;
}

bool RecordAgrees(const TimingStats& record, const TimingStats& fresh, double slack) {
  if (slack < 0 || record.iters == 0 || fresh.iters == 0) return false;
  return record.ci_lo_us <= fresh.ci_hi_us * (1 + slack) &&
         record.ci_hi_us >= fresh.ci_lo_us * (1 - slack);
}

void RecordBaselines(EvalSession& s) {
  if (s.baselines == nullptr || s.options->baseline_reuse_s <= 0) return;
  for (const SizePlan& plan : s.plans) {
    if (plan.check || plan.BaselineReused() || plan.baseline.side.claimed_us.empty()) continue;
    BaselineRecord r;
    r.timing = plan.baseline;
    r.measured = std::chrono::steady_clock::now();
    s.baselines->Store(BaselineCache::Key(s, plan), std::move(r));
  }
}

}  // namespace kforge::eval
