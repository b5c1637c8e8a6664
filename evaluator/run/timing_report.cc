// The timing entry of each bench size, once the baseline has been timed
// before and after the candidate: the candidate's claimed event times are
// accepted only where the harness's own clock agrees with them.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "run/expert.h"
#include "run/stats.h"
#include "session.h"

namespace kforge::eval {

using nlohmann::json;

namespace {

// How far the candidate's claim may fall below the harness's wall time per
// call beyond what the path costs an honest kernel: the calibrated overhead of
// the mailbox, or the reference's own gap at this size if larger (host waits
// inside the emulated collectives show there too).
constexpr double kSlackUs = 3.0;
constexpr double kSlackFraction = 0.03;
// Where speedups are indicative (more than four ranks time-slice one GPU:
// they repeat only to about +-15%), the gap moves as much from one
// evaluation to the next: on an H100 at W = 8, honest one-shot kernels read
// 33-36 us at 1 MiB against a reference's 25.5 us and were refused in 4 of
// 23 evaluations at 3%. A kernel there may hide what the speedup's own
// uncertainty already admits.
constexpr double kIndicativeSlackFraction = 0.15;
constexpr double kDriftWarning = 0.05;
// SM clocks that moved more than this between the baseline's blocks.
constexpr double kClockWarning = 0.03;
// A claim under half the physical floor is impossible whatever the floor's
// approximations (peaks from data sheets, the task's byte counts); between
// half and 85% it is flagged for a look at the task's [floor].
constexpr double kImpossibleBelowFloor = 0.5;
constexpr double kSuspectBelowFloor = 0.85;

// The median over the calls of one side (0 when empty).
double Median(const std::vector<double>& v) { return v.empty() ? 0 : Quantile(v, 0.5); }

}  // namespace

void FinishTiming(EvalSession& s) {
  for (SizePlan& plan : s.plans) {
    if (plan.check || plan.candidate.claimed_us.empty() || plan.baseline.side.claimed_us.empty())
      continue;
    const Problem& p = plan.problem;
    TimingStats base = Summarize(plan.baseline.side.claimed_us, plan.baseline.side.wall_us,
                                 plan.baseline.side.blocks);
    TimingStats cand =
        Summarize(plan.candidate.claimed_us, plan.candidate.wall_us, plan.candidate.blocks);
    // Wall minus claim per call (run/stats.h CallGaps: per rank where ranks share a GPU).
    const double gap_us = Median(plan.candidate.gap_us);
    const double reference_gap_us = Median(plan.baseline.side.gap_us);
    const double path_us = std::max(s.candidate.overhead_us, reference_gap_us);
    const double slack_fraction =
        s.SpeedupsIndicative() ? kIndicativeSlackFraction : kSlackFraction;
    const double allowed_us = path_us + kSlackUs + slack_fraction * cand.median_us;
    json warnings = json::array();
    if (s.SpeedupsIndicative()) {
      warnings.push_back(fmt::format(
          "{} ranks share one GPU: this size's speedup repeats only to about +-15% from one "
          "evaluation to the next (indicative; compare on separate GPUs)",
          s.world));
    }
    if (gap_us > allowed_us) {
      s.integrity.push_back(
          {{"check", "timing"},
           {"size", plan.size.label},
           {"message",
            fmt::format(
                "the kernel's process claimed {:.1f} us per call, but the harness measured "
                "{:.1f} us (the same path costs the task's reference {:.1f} us more than its "
                "claim): work outside the timed stream, or forged times",
                cand.median_us, cand.host_median_us, path_us)}});
    }
    double drift = 0;
    if (plan.baseline.before_us > 0 && plan.baseline.after_us > 0) {
      drift = plan.baseline.after_us / plan.baseline.before_us - 1;
      if (std::abs(drift) > kDriftWarning) {
        warnings.push_back(
            fmt::format("the baseline drifted by {:+.1f}% between before and after the candidate",
                        100 * drift));
      }
    }
    json clocks = nullptr;
    if (!plan.baseline.side.sm_clock_mhz.empty()) {
      auto [lo, hi] = std::minmax_element(plan.baseline.side.sm_clock_mhz.begin(),
                                          plan.baseline.side.sm_clock_mhz.end());
      auto [tlo, thi] = std::minmax_element(plan.baseline.side.temperature_c.begin(),
                                            plan.baseline.side.temperature_c.end());
      clocks = {{"sm_clock_mhz", {*lo, *hi}}, {"temperature_c", {*tlo, *thi}}};
      if (*hi > 0 && (*hi - *lo) / *hi > kClockWarning) {
        warnings.push_back(fmt::format(
            "the SM clock moved between {:.0f} and {:.0f} MHz while the baseline was timed "
            "({:.0f}-{:.0f} C): the GPU throttled or changed clocks, and the speedup may be off",
            *lo, *hi, *tlo, *thi));
      }
    }
    const double b = base.median_us, c = cand.median_us;
    const TimingRule rule = s.Rule();
    const double precision = rule.precision;  // the target the sides were timed to
    for (const auto& [who, st] : {std::pair{"baseline", &base}, std::pair{"candidate", &cand}}) {
      if (st->RelativeHalfWidth() > precision) {
        warnings.push_back(fmt::format(
            "the {}'s median is known to +-{:.1f}% (target +-{:.1f}%) after {} calls in {} "
            "blocks: the time cap ran out first",
            who, 100 * st->RelativeHalfWidth(), 100 * precision, st->iters, st->blocks));
      }
    }
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
        {"warmup_iters", plan.baseline.warmup},
        {"baseline", base.ToJson()},
        {"candidate", cand.ToJson()},
        {"harness_overhead_us", s.candidate.overhead_us},
        {"wall_minus_claimed_us", gap_us},
        {"baseline_wall_minus_claimed_us", reference_gap_us},
        {"rank_wall_spread_us", Median(plan.candidate.spread_us)},
        {"baseline_drift", drift},
        {"baseline_reused", plan.BaselineReused()
                                ? json{{"age_s", plan.reused_baseline_age_s},
                                       {"uses", plan.reused_baseline_uses},
                                       {"confirm_median_us", plan.confirm_median_us}}
                                : json(nullptr)},
        {"clocks", clocks},
        {"revalidated", true},
        // The rule both sides were timed by (a reused baseline's record was
        // made under the same one: the reuse key holds it).
        {"rule",
         {{"precision", rule.precision}, {"cap_s", rule.cap_s}, {"min_calls", rule.min_calls}}},
        {"speedup", c > 0 ? b / c : 0},
        // Both medians' 95% intervals taken at their unfavourable ends.
        {"speedup_ci95",
         {cand.ci_hi_us > 0 ? base.ci_lo_us / cand.ci_hi_us : 0,
          cand.ci_lo_us > 0 ? base.ci_hi_us / cand.ci_lo_us : 0}},
        {"algbw_gbps", c > 0 ? p.perf_bytes / (c * 1e-6) / 1e9 : 0},
        {"busbw_gbps", c > 0 ? p.perf_bytes / (c * 1e-6) / 1e9 * p.busbw_factor : 0},
        {"baseline_busbw_gbps", b > 0 ? p.perf_bytes / (b * 1e-6) / 1e9 * p.busbw_factor : 0},
        {"roofline", roofline},
        {"expert", ExpertEntry(plan, base, cand)},
        {"warnings", warnings}};
    s.timing.push_back(std::move(entry));
  }
}

}  // namespace kforge::eval
