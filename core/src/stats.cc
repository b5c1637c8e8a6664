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

double StudentT975(int dof) {
  static constexpr double kTable[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                                      2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                                      2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                                      2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  constexpr int kListed = static_cast<int>(sizeof(kTable) / sizeof(kTable[0]));
  if (dof < 1) return kTable[0];
  if (dof <= kListed) return kTable[dof - 1];
  // Beyond 30: the normal's 1.96 plus the first term of the expansion in 1/dof.
  return 1.96 + 2.4 / dof;
}

Interval BlockedMedianInterval(const std::vector<double>& v, const std::vector<int>& block_sizes) {
  Interval ci = MedianInterval(v);
  const int k = static_cast<int>(block_sizes.size());
  size_t total = 0;
  for (int b : block_sizes) total += b > 0 ? static_cast<size_t>(b) : 0;
  if (k < 2 || total != v.size() ||
      std::any_of(block_sizes.begin(), block_sizes.end(), [](int b) { return b <= 0; })) {
    return ci;
  }
  std::vector<double> medians;
  size_t at = 0;
  for (int b : block_sizes) {
    medians.push_back(Quantile(std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(at),
                                                   v.begin() + static_cast<std::ptrdiff_t>(at + b)),
                               0.5));
    at += static_cast<size_t>(b);
  }
  double mean = 0;
  for (double m : medians) mean += m;
  mean /= k;
  double ss = 0;
  for (double m : medians) ss += (m - mean) * (m - mean);
  const double sd = std::sqrt(ss / (k - 1));
  const double half = StudentT975(k - 1) * sd / std::sqrt(static_cast<double>(k));
  const double median = Quantile(v, 0.5);
  ci.lo = std::min(ci.lo, median - half);
  ci.hi = std::max(ci.hi, median + half);
  return ci;
}

}  // namespace kforge
