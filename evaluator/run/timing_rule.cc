#include "run/timing_rule.h"

#include <algorithm>
#include <cmath>

#include "kforge/core/stats.h"

namespace kforge::eval {

double RelativeHalfWidth(const std::vector<double>& times_us, const std::vector<int>& block_sizes) {
  const double median = Quantile(times_us, 0.5);
  if (median <= 0) return 0;
  const Interval ci = BlockedMedianInterval(times_us, block_sizes);
  return (ci.hi - ci.lo) / 2 / median;
}

int NextBlock(const TimingRule& rule, const std::vector<double>& times_us,
              const std::vector<int>& block_sizes, double spent_s, double call_wall_us) {
  const int n = static_cast<int>(times_us.size());
  if (n >= rule.max_calls) return 0;
  if (n >= rule.min_calls) {
    if (static_cast<int>(block_sizes.size()) >= rule.min_blocks &&
        RelativeHalfWidth(times_us, block_sizes) <= rule.precision) {
      return 0;
    }
    if (spent_s >= rule.cap_s) return 0;
  }
  const double per_call = std::max(call_wall_us, 1.0);
  // A block fits the time left under the cap; the minimum is always reached.
  const double left_s = std::max(rule.cap_s - spent_s, 0.0);
  double calls = std::min(rule.block_s, left_s) * 1e6 / per_call;
  calls = std::clamp(calls, 10.0, 5000.0);
  int block = static_cast<int>(calls);
  block = std::max(block, rule.min_calls - n);
  return std::min(block, rule.max_calls - n);
}

int WarmupCalls(const TimingRule& rule, double call_wall_us) {
  return static_cast<int>(
      std::clamp(rule.warmup_s * 1e6 / std::max(call_wall_us, 1.0), 10.0, 5000.0));
}

}  // namespace kforge::eval
