#include "run/stats.h"

#include <algorithm>
#include <cmath>

namespace kforge::eval {

TimingStats Summarize(const std::vector<double>& event_us, const std::vector<double>& host_us,
                      const std::vector<int>& block_sizes) {
  TimingStats s;
  s.iters = static_cast<int>(event_us.size());
  s.blocks = static_cast<int>(block_sizes.size());
  if (event_us.empty()) return s;
  s.median_us = Quantile(event_us, 0.5);
  s.p25_us = Quantile(event_us, 0.25);
  s.p75_us = Quantile(event_us, 0.75);
  s.min_us = *std::min_element(event_us.begin(), event_us.end());
  double sum = 0, sq = 0;
  for (double x : event_us) sum += x;
  s.mean_us = sum / event_us.size();
  for (double x : event_us) sq += (x - s.mean_us) * (x - s.mean_us);
  s.cv =
      event_us.size() > 1 && s.mean_us > 0 ? std::sqrt(sq / (event_us.size() - 1)) / s.mean_us : 0;
  s.host_median_us = Quantile(host_us, 0.5);
  const Interval ci = BlockedMedianInterval(event_us, block_sizes);
  s.ci_lo_us = ci.lo;
  s.ci_hi_us = ci.hi;
  return s;
}

std::vector<double> MaxOverRanks(const std::vector<std::vector<double>>& by_rank) {
  std::vector<double> out;
  if (by_rank.empty()) return out;
  size_t n = by_rank[0].size();
  for (const auto& r : by_rank) n = std::min(n, r.size());
  out.assign(n, 0);
  for (const auto& r : by_rank) {
    for (size_t i = 0; i < n; ++i) out[i] = std::max(out[i], r[i]);
  }
  return out;
}

namespace {
size_t Calls(const std::vector<std::vector<double>>& a) {
  size_t n = a.empty() ? 0 : a[0].size();
  for (const auto& r : a) n = std::min(n, r.size());
  return n;
}
}  // namespace

std::vector<double> CallGaps(const std::vector<std::vector<double>>& wall,
                             const std::vector<std::vector<double>>& claimed, bool shared_gpu) {
  std::vector<double> out;
  const size_t ranks = std::min(wall.size(), claimed.size());
  if (ranks == 0) return out;
  const size_t n = std::min(Calls(wall), Calls(claimed));
  if (!shared_gpu) {
    const std::vector<double> w = MaxOverRanks(wall), c = MaxOverRanks(claimed);
    for (size_t i = 0; i < n; ++i) out.push_back(w[i] - c[i]);
    return out;
  }
  for (size_t i = 0; i < n; ++i) {
    double gap = wall[0][i] - claimed[0][i];
    for (size_t r = 1; r < ranks; ++r) gap = std::min(gap, wall[r][i] - claimed[r][i]);
    out.push_back(gap);
  }
  return out;
}

std::vector<double> WallSpread(const std::vector<std::vector<double>>& wall) {
  std::vector<double> out;
  const size_t n = Calls(wall);
  for (size_t i = 0; i < n; ++i) {
    double lo = wall[0][i], hi = wall[0][i];
    for (const auto& r : wall) lo = std::min(lo, r[i]), hi = std::max(hi, r[i]);
    out.push_back(hi - lo);
  }
  return out;
}

nlohmann::json TimingStats::ToJson() const {
  return {{"median_us", median_us},
          {"min_us", min_us},
          {"p25_us", p25_us},
          {"p75_us", p75_us},
          {"mean_us", mean_us},
          {"cv", cv},
          {"iters", iters},
          {"blocks", blocks},
          {"host_us", host_median_us},
          {"ci95_us", {ci_lo_us, ci_hi_us}}};
}

}  // namespace kforge::eval
