// Leaderboard metrics over session outcomes. Definitions (docs/results.md):
//
// A *problem* is (task, world size, dtype). Within a group (say one model and
// one strategy) each problem has n samples (sessions), c of them correct.
//  - correct rate = fast_0: fraction of problems with at least one correct sample.
//  - fast_p: fraction of problems with a correct sample whose speedup > p.
//  - pass@k, fast1@k: mean over problems of 1 - C(n-c, k) / C(n, k), with c
//    counting correct (pass) or correct-and-speedup>1 (fast1) samples; only
//    reported for k <= the smallest n in the group.
//  - geomean speedup, two figures: over problems whose best sample is correct
//    and timed ("correct only"), and over all problems with an incorrect one
//    counted as 1.0, i.e. falling back to the baseline ("all").
//  - against the expert (the task's best known human kernel, timed beside the
//    baseline where the task has one): over the problems whose task's expert
//    was timed in any sample, human parity = share with a correct sample at
//    least as fast as the expert; expert fast_p = share with a correct sample
//    faster than p x the expert; the geomean of the best correct samples' speed
//    over the expert.
//  - tokens and dollars per solved problem: all tokens/dollars spent in the
//    group divided by the number of problems solved (correct).
// Sessions that were never evaluated (SampleOutcome::not_evaluated: no GPU,
// model unreachable, evaluator failure) count in no figure: they are not
// problems, samples, or wrong answers. Each row counts them apart, and a row
// made only of them has no problems and no figures (`evaluated()` is false).
// Emulated timings (ranks sharing a GPU) are not NVLink timings: by default
// their sessions form separate rows, flagged `emulated`.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/results/samples.h"

namespace kforge::results {

// Unbiased estimator of pass@k from n samples with c successes:
// 1 - C(n-c,k)/C(n,k), computed as a product to stay exact for large n.
// Requires 0 <= c <= n and 1 <= k <= n.
double PassAtK(int n, int c, int k);

enum class EmulatedPolicy {
  kSeparate,  // real-hardware rows, then emulated rows labelled as such (default)
  kExclude,   // drop emulated sessions
  kInclude,   // pool them with real ones (rows say so)
};

struct MetricsOptions {
  std::vector<double> ps = {0, 1, 1.2, 1.5, 2};
  std::vector<int> ks = {1, 5, 10};
  // Dimensions a row is grouped by: any of run, model, strategy, category, world, dtype.
  std::vector<std::string> group_by = {"model", "strategy"};
  EmulatedPolicy emulated = EmulatedPolicy::kSeparate;
};

// Parses "model,strategy" into dimensions; an unknown one is kInvalidInput.
Result<std::vector<std::string>> ParseGroupBy(std::string_view spec);

struct GroupMetrics {
  std::vector<std::pair<std::string, std::string>> key;  // (dimension, value) in group_by order
  std::string label;                                     // values joined by " / "
  bool emulated = false;           // a separate row of emulated sessions (kSeparate)
  bool includes_emulated = false;  // some of its sessions ran emulated
  int problems = 0;
  int samples = 0;        // evaluated sessions only
  int not_evaluated = 0;  // sessions left out: nothing judged them
  int solved = 0;         // problems with a correct sample
  double correct_rate = 0;
  std::vector<std::pair<double, double>> fast_p;  // (p, fast_p)
  std::vector<std::pair<int, double>> pass_at_k;
  std::vector<std::pair<int, double>> fast1_at_k;
  std::optional<double> geomean_correct;                 // over correct, timed problems
  double geomean_all = 1;                                // incorrect counted as 1.0
  int expert_problems = 0;                               // problems whose task's expert was timed
  std::optional<double> human_parity;                    // share of those at >= 1x the expert
  std::vector<std::pair<double, double>> expert_fast_p;  // (p, share > p x the expert), p > 0
  std::optional<double> geomean_vs_expert;               // best correct over the expert
  int64_t tokens = 0;
  double cost_usd = 0;
  std::optional<double> tokens_per_solved, cost_per_solved;
  double wall_s = 0;

  double FastP(double p) const;  // NaN when p was not computed
  bool evaluated() const { return problems > 0; }
};

// Rows sorted by fast_1 (then correct rate, geomean, label); emulated rows last.
std::vector<GroupMetrics> ComputeMetrics(const std::vector<SampleOutcome>& samples,
                                         const MetricsOptions& options);

// The value of one dimension ("model", "world", …) for a sample.
std::string DimensionValue(const SampleOutcome& s, const std::string& dimension);

}  // namespace kforge::results
