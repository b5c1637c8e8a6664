// Sampling filters for oracles (kforge/oracle_math.h): top-k then top-p over
// one row of logits, in fp64, ties decided by value.
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "kforge/oracle_math.h"

namespace kforge::om {

FilteredRow TopKTopPFilter(std::span<const double> z, int64_t target, int64_t top_k, double top_p) {
  const int64_t v = static_cast<int64_t>(z.size());
  const int64_t k = std::min(top_k, v);
  std::vector<double> s(z.begin(), z.end());
  std::sort(s.begin(), s.end(), std::greater<double>());
  FilteredRow r;
  r.m = s[0];
  // tau: the k-th largest, counted with multiplicity; the top-k set is every
  // value >= tau (ties kept), the first n_k of the sorted row.
  const double tau = s[static_cast<size_t>(k - 1)];
  int64_t n_k = k;
  while (n_k < v && s[static_cast<size_t>(n_k)] >= tau) ++n_k;
  double z_k = 0;
  for (int64_t i = 0; i < n_k; ++i) z_k += std::exp(s[i] - r.m);
  // Groups of equal values, largest first: a group is kept while the mass of
  // the strictly larger values is < top_p * z_k (always the first).
  double above = 0;
  r.theta = s[0];
  for (int64_t i = 0; i < n_k;) {
    int64_t j = i;
    double group = 0;
    while (j < n_k && s[j] == s[i]) group += std::exp(s[j++] - r.m);
    if (!(above < top_p * z_k)) break;
    r.theta = s[i];
    above += group;
    i = j;
  }
  double z_s = 0;
  for (int64_t i = 0; i < n_k && s[i] >= r.theta; ++i) z_s += std::exp(s[i] - r.m);
  const double zt = z[static_cast<size_t>(target)];
  if (zt < r.theta) z_s += std::exp(zt - r.m);  // the target is always part of the support
  r.log_z = std::log(z_s);
  return r;
}

}  // namespace kforge::om
