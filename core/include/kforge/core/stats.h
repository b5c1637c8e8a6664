// Order statistics and a fixed-sequence random generator, shared by the
// evaluator's timing summaries and the results' bootstrap intervals.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kforge {

// The q-quantile (q in [0, 1]) by linear interpolation between closest ranks
// (numpy's default, "linear"); 0 for an empty sample.
double Quantile(std::vector<double> v, double q);

// A distribution-free 95% confidence interval for the median: the order
// statistics x_(r), x_(s) with r, s = (n + 1) / 2 -/+ 1.96 sqrt(n) / 2 (the
// binomial's normal approximation; within a rank of the exact tables from
// n = 6). Both ends are the sample's extremes below n = 6; {0, 0} when empty.
struct Interval {
  double lo = 0, hi = 0;
};
Interval MedianInterval(std::vector<double> v);

// The median's 95% interval where the values come in blocks (consecutive runs
// of block_sizes[j] values, in order) whose levels differ: calls of one block
// share what the GPU did in those milliseconds, so they are not independent,
// and MedianInterval alone is too narrow (the speedup of the reference timed
// against itself at 1 MiB and pkb fell outside its interval in 13 of 16
// evaluations, H200). With k >= 2 blocks it is the
// union of MedianInterval and median -/+ t(k-1) sd(block medians) / sqrt(k),
// Student's t at 97.5% on the blocks' medians; with fewer, MedianInterval.
// Block sizes that do not add up to the values' count are an error of the
// caller, answered with MedianInterval.
Interval BlockedMedianInterval(const std::vector<double>& v, const std::vector<int>& block_sizes);
// Student's t quantile at 97.5% for `dof` degrees of freedom (dof >= 1).
double StudentT975(int dof);

// SplitMix64 (Steele, Lea, Flood 2014): a tiny generator whose sequence is
// fixed by its definition, so a seed gives the same numbers on every platform
// and standard library.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) by 128-bit multiply (bias below 2^-40 for n < 2^24).
  size_t Below(size_t n) {
    return static_cast<size_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }

 private:
  uint64_t state_;
};

}  // namespace kforge
