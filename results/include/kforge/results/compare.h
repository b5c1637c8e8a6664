// Paired comparison of two sides (two runs, or two models/strategies within
// runs) over the problems both attempted: per-problem wins and losses and
// paired-bootstrap confidence intervals for the difference in fast_1 and the
// ratio of geomean speedups.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/results/samples.h"

namespace kforge::results {

// Which sessions form one side. Spec syntax:
//   RUN                         every session of a run (directory or name under runs/)
//   RUN:model=M,strategy=S      some sessions of a run
//   model=M[,strategy=S…]       sessions of the runs given with --run
// Filter keys: model, strategy, category, world, dtype.
struct Selector {
  std::vector<std::filesystem::path> run_dirs;
  std::map<std::string, std::string> filters;
  std::string label;  // the spec as written
};
Result<Selector> ParseSelector(const std::string& spec, const std::filesystem::path& runs_root,
                               const std::vector<std::filesystem::path>& default_runs);
bool Matches(const Selector& selector, const SampleOutcome& sample);

struct CompareOptions {
  int resamples = 2000;
  uint64_t seed = 1;
  double confidence = 0.95;
  double tie_tolerance = 0.02;    // speedups within 2% are a tie
  bool include_emulated = false;  // emulated sessions are left out by default
};
// kInvalidInput naming the option when a value makes no sense: confidence
// outside (0, 1), fewer than 100 resamples, a negative tie tolerance.
Status ValidateCompareOptions(const CompareOptions& options);

// One problem's best sample on each side.
struct ProblemSide {
  bool correct = false;
  double speedup = 1.0;  // best correct speedup; 1.0 when incorrect or untimed
  bool fast1 = false;    // correct and speedup > 1
  // Best correct speed over the task's expert kernel, where one was timed.
  std::optional<double> vs_expert;
  bool expert = false;  // some sample of this problem was timed beside the expert
};

struct ProblemComparison {
  std::string problem;  // task/wWORLD/dtype
  ProblemSide a, b;
  int outcome = 0;  // +1: A wins, -1: B wins, 0: tie
};

struct Interval {
  double estimate = 0, lo = 0, hi = 0;
  bool significant = false;  // the interval excludes "no difference"
};

struct Comparison {
  std::string a_label, b_label;
  std::vector<ProblemComparison> problems;  // paired, sorted by name
  int wins = 0, losses = 0, ties = 0;
  int only_a = 0, only_b = 0;  // problems one side lacks (not compared)
  int excluded_emulated = 0;
  int not_evaluated_a = 0, not_evaluated_b = 0;  // sessions nothing judged (left out)
  // Human parity over the paired problems whose task has an expert kernel:
  // problems where each side's best correct sample is at least as fast as it.
  int expert_problems = 0, parity_a = 0, parity_b = 0;
  Interval fast1_diff;     // fast_1(A) - fast_1(B), in [−1, 1]
  Interval geomean_ratio;  // geomean_all(A) / geomean_all(B)
  int resamples = 0;
  uint64_t seed = 0;
  double confidence = 0;
  std::string verdict;  // plain sentences
};

Comparison Compare(const std::vector<SampleOutcome>& a, const std::vector<SampleOutcome>& b,
                   const std::string& a_label, const std::string& b_label,
                   const CompareOptions& options);

std::string RenderComparisonText(const Comparison& c);
std::string RenderComparisonJson(const Comparison& c);

}  // namespace kforge::results
