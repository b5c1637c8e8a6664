// Summary statistics of per-iteration times.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "kforge/core/stats.h"

namespace kforge::eval {

struct TimingStats {
  int iters = 0;
  double median_us = 0, min_us = 0, p25_us = 0, p75_us = 0, mean_us = 0, cv = 0;
  double host_median_us = 0;
  double ci_lo_us = 0, ci_hi_us = 0;  // the median's 95% interval (kforge::MedianInterval)
  double RelativeHalfWidth() const {
    return median_us > 0 ? (ci_hi_us - ci_lo_us) / 2 / median_us : 0;
  }
  nlohmann::json ToJson() const;
};

TimingStats Summarize(const std::vector<double>& event_us, const std::vector<double>& host_us);
// Per-iteration maximum over ranks: by_rank[r][i] -> out[i].
std::vector<double> MaxOverRanks(const std::vector<std::vector<double>>& by_rank);

}  // namespace kforge::eval
