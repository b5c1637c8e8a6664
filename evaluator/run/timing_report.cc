// The timing entry of each bench size, once the baseline has been timed
// before and after the candidate: the candidate's claimed event times are
// accepted only where the harness's own clock agrees with them.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "run/stats.h"
#include "session.h"

namespace kforge::eval {

using nlohmann::json;

namespace {

// How far the candidate's claim may fall below the harness's wall time per
// call beyond the calibrated overhead of the mailbox path.
constexpr double kSlackUs = 3.0;
constexpr double kSlackFraction = 0.03;
constexpr double kDriftWarning = 0.05;
// A claim under half the physical floor is impossible whatever the floor's
// approximations (peaks from data sheets, the task's byte counts); between
// half and 85% it is flagged for a look at the task's [floor].
constexpr double kImpossibleBelowFloor = 0.5;
constexpr double kSuspectBelowFloor = 0.85;

}  // namespace

void FinishTiming(EvalSession& s) {
  for (SizePlan& plan : s.plans) {
    if (plan.check || plan.claimed_us.empty() || plan.baseline_us.empty()) continue;
    const Problem& p = plan.problem;
    TimingStats base = Summarize(plan.baseline_us, plan.baseline_us);
    TimingStats cand = Summarize(plan.claimed_us, plan.wall_us);
    std::vector<double> gap;
    for (size_t k = 0; k < plan.wall_us.size(); ++k)
      gap.push_back(plan.wall_us[k] - plan.claimed_us[k]);
    const double gap_us = Quantile(gap, 0.5);
    const double allowed_us = s.overhead_us + kSlackUs + kSlackFraction * cand.median_us;
    json warnings = json::array();
    if (gap_us > allowed_us) {
      s.integrity.push_back(
          {{"check", "timing"},
           {"size", plan.size.label},
           {"message",
            fmt::format("the kernel's process claimed {:.1f} us per call, but the harness measured "
                        "{:.1f} us "
                        "(the mailbox path itself costs {:.1f} us): work outside the timed stream, "
                        "or forged times",
                        cand.median_us, cand.host_median_us, s.overhead_us)}});
    }
    double drift = 0;
    if (plan.baseline_before_us > 0 && plan.baseline_after_us > 0) {
      drift = plan.baseline_after_us / plan.baseline_before_us - 1;
      if (std::abs(drift) > kDriftWarning) {
        warnings.push_back(
            fmt::format("the baseline drifted by {:+.1f}% between before and after the candidate",
                        100 * drift));
      }
    }
    const double b = base.median_us, c = cand.median_us;
    const Floor floor = FloorOf(p, s.peaks, s.emulated);
    json roofline = nullptr;
    if (floor.us > 0 && c > 0) {
      roofline = {{"floor_us", floor.us},
                  {"bound", floor.bound},
                  {"fraction", floor.us / c},
                  {"baseline_fraction", b > 0 ? floor.us / b : 0}};
      if (c < kImpossibleBelowFloor * floor.us) {
        s.integrity.push_back(
            {{"check", "floor"},
             {"size", plan.size.label},
             {"message",
              fmt::format("{:.1f} us per call is under half of this call's physical floor, {:.1f} "
                          "us ({}-bound at the GPU's peak): no kernel is that fast",
                          c, floor.us, floor.bound)}});
      } else if (c < kSuspectBelowFloor * floor.us) {
        warnings.push_back(fmt::format(
            "{:.1f} us per call is below the task's floor of {:.1f} us ({}-bound): check the "
            "task's [floor]",
            c, floor.us, floor.bound));
      }
    }
    json entry = {
        {"size", plan.size.label},
        {"bytes", p.perf_bytes},
        {"sets", plan.sets},
        {"warmup_iters", plan.warmup},
        {"baseline", base.ToJson()},
        {"candidate", cand.ToJson()},
        {"harness_overhead_us", s.overhead_us},
        {"wall_minus_claimed_us", gap_us},
        {"baseline_drift", drift},
        {"revalidated", true},
        {"speedup", c > 0 ? b / c : 0},
        {"algbw_gbps", c > 0 ? p.perf_bytes / (c * 1e-6) / 1e9 : 0},
        {"busbw_gbps", c > 0 ? p.perf_bytes / (c * 1e-6) / 1e9 * p.busbw_factor : 0},
        {"baseline_busbw_gbps", b > 0 ? p.perf_bytes / (b * 1e-6) / 1e9 * p.busbw_factor : 0},
        {"roofline", roofline},
        {"warnings", warnings}};
    s.timing.push_back(std::move(entry));
  }
}

}  // namespace kforge::eval
