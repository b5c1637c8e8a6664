// How many timed calls a bench size gets: calls are taken in blocks until the
// median's 95% confidence interval is narrow enough (EvalOptions::
// timing_precision, half-width relative to the median) or the size's time cap
// is spent. Quiet sizes stop after the minimum; noisy ones get the calls they
// need, within the cap (docs/methodology.md).
#pragma once

#include <vector>

namespace kforge::eval {

struct TimingRule {
  double precision = 0.005;  // stop when the CI's half-width / median is at most this
  double cap_s = 0.5;        // wall seconds for one side (baseline or candidate) of one size
  int min_calls = 20;
  // Blocks before precision may stop a side: the spread of their medians is
  // what the interval rests on (BlockedMedianInterval).
  int min_blocks = 3;
  int max_calls = 20000;
  double block_s = 0.05;   // wall seconds per block, from the probe's time per call
  double warmup_s = 0.05;  // untimed calls before the first block
};

// The half-width of the median's 95% interval over the median (0 when
// empty), the interval widened by the spread between blocks where the times
// came in blocks of `block_sizes` calls (kforge::BlockedMedianInterval).
double RelativeHalfWidth(const std::vector<double>& times_us,
                         const std::vector<int>& block_sizes = {});

// The size of the next block (0: stop), given the times so far and the
// blocks they came in, the wall seconds spent on them, and the wall
// microseconds one call costs.
int NextBlock(const TimingRule& rule, const std::vector<double>& times_us,
              const std::vector<int>& block_sizes, double spent_s, double call_wall_us);

// Untimed calls before the first block.
int WarmupCalls(const TimingRule& rule, double call_wall_us);

}  // namespace kforge::eval
