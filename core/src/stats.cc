#include "kforge/core/stats.h"

#include <algorithm>
#include <cmath>

namespace kforge {

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

Interval MedianInterval(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  const double half = 1.96 * std::sqrt(n) / 2;
  // 1-based ranks, clamped to the sample.
  const double r = std::max(1.0, std::floor((n + 1) / 2 - half));
  const double s = std::min(n, std::ceil((n + 1) / 2 + half));
  return {v[static_cast<size_t>(r) - 1], v[static_cast<size_t>(s) - 1]};
}

}  // namespace kforge
