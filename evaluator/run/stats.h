// Summary statistics of per-iteration times.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "kforge/core/stats.h"

namespace kforge::eval {

struct TimingStats {
  int iters = 0;
  int blocks = 0;  // the driven blocks the calls came in (0: not known)
  double median_us = 0, min_us = 0, p25_us = 0, p75_us = 0, mean_us = 0, cv = 0;
  double host_median_us = 0;
  // The median's 95% interval (kforge::BlockedMedianInterval: widened by the
  // spread between blocks where there are two or more).
  double ci_lo_us = 0, ci_hi_us = 0;
  double RelativeHalfWidth() const {
    return median_us > 0 ? (ci_hi_us - ci_lo_us) / 2 / median_us : 0;
  }
  nlohmann::json ToJson() const;
};

TimingStats Summarize(const std::vector<double>& event_us, const std::vector<double>& host_us,
                      const std::vector<int>& block_sizes = {});
// Per-iteration maximum over ranks: by_rank[r][i] -> out[i].
std::vector<double> MaxOverRanks(const std::vector<std::vector<double>>& by_rank);

// Per call, the wall time the served processes' claims leave unexplained
// (wall[r][i], claimed[r][i]: rank r's wall time and claim of call i).
// Ranks on GPUs of their own run their kernels side by side: the slowest
// rank's wall minus the largest claim. Ranks sharing one GPU (`shared_gpu`)
// do not: where a kernel's ranks never wait for each other, the GPU runs one
// rank's work after another's, and a rank's event window opens only when its
// work starts, so the last rank's claim leaves out how long it queued. There
// each rank is judged on its own wall and claim, and the call's gap is the
// smallest of them (docs/methodology.md, "Which time counts").
std::vector<double> CallGaps(const std::vector<std::vector<double>>& wall,
                             const std::vector<std::vector<double>>& claimed, bool shared_gpu);
// Per call, the latest rank's wall minus the earliest's.
std::vector<double> WallSpread(const std::vector<std::vector<double>>& wall);

}  // namespace kforge::eval
