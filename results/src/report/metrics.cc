#include "kforge/results/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "kforge/core/strings.h"

namespace kforge::results {

namespace {

constexpr const char* kDimensions[] = {"run", "model", "strategy", "category", "world", "dtype"};

struct Problem {
  int n = 0, correct = 0, fast1 = 0;
  std::optional<double> best_speedup;  // over correct, timed samples
  std::optional<double> best_expert;   // over correct samples timed beside the expert
  bool any_correct = false;
  bool has_expert = false;  // the task's expert kernel was timed in some sample
};

std::string ProblemId(const SampleOutcome& s) {
  return s.task + "\x1f" + std::to_string(s.world) + "\x1f" + s.dtype;
}

GroupMetrics Summarise(const std::vector<const SampleOutcome*>& members,
                       const MetricsOptions& options, const std::set<std::string>& expert_tasks) {
  GroupMetrics g;
  std::map<std::string, Problem> problems;
  std::vector<const SampleOutcome*> evaluated;
  // Spend of the evaluated sessions: the per-solved ratios divide it alone.
  int64_t judged_tokens = 0;
  double judged_usd = 0;
  for (const auto* s : members) {
    if (s->not_evaluated) {
      ++g.not_evaluated;
      g.tokens += s->tokens;
      g.cost_usd += s->cost_usd;
      g.wall_s += s->wall_s;
      continue;
    }
    evaluated.push_back(s);
  }
  for (const auto* s : evaluated) {
    Problem& p = problems[ProblemId(*s)];
    p.has_expert = expert_tasks.count(s->task) > 0;
    ++p.n;
    if (s->correct) {
      ++p.correct;
      p.any_correct = true;
      if (s->speedup) {
        if (*s->speedup > 1) ++p.fast1;
        p.best_speedup = std::max(p.best_speedup.value_or(0), *s->speedup);
      }
      if (s->expert_speedup)
        p.best_expert = std::max(p.best_expert.value_or(0), *s->expert_speedup);
    }
    g.tokens += s->tokens;
    g.cost_usd += s->cost_usd;
    g.wall_s += s->wall_s;
    judged_tokens += s->tokens;
    judged_usd += s->cost_usd;
    g.includes_emulated = g.includes_emulated || s->emulated;
  }
  g.samples = static_cast<int>(evaluated.size());
  g.problems = static_cast<int>(problems.size());
  if (g.problems == 0) return g;
  int min_n = std::numeric_limits<int>::max();
  double log_correct = 0, log_all = 0;
  int timed_correct = 0;
  for (const auto& [id, p] : problems) {
    min_n = std::min(min_n, p.n);
    if (p.any_correct) ++g.solved;
    if (p.best_speedup) {
      log_correct += std::log(*p.best_speedup);
      log_all += std::log(*p.best_speedup);
      ++timed_correct;
    }
  }
  const double np = g.problems;
  g.correct_rate = g.solved / np;
  for (double threshold : options.ps) {
    int fast = 0;
    for (const auto& [id, p] : problems) {
      // fast_0 is the correct rate: a correct but untimed problem still counts.
      if (threshold == 0 ? p.any_correct : (p.best_speedup && *p.best_speedup > threshold)) ++fast;
    }
    g.fast_p.emplace_back(threshold, fast / np);
  }
  for (int k : options.ks) {
    if (k < 1 || k > min_n) continue;
    double pass = 0, fast = 0;
    for (const auto& [id, p] : problems) {
      pass += PassAtK(p.n, p.correct, k);
      fast += PassAtK(p.n, p.fast1, k);
    }
    g.pass_at_k.emplace_back(k, pass / np);
    g.fast1_at_k.emplace_back(k, fast / np);
  }
  if (timed_correct > 0) g.geomean_correct = std::exp(log_correct / timed_correct);
  // Against the expert: over the problems whose task has one; an incorrect
  // (or untimed) sample is below parity.
  double log_expert = 0;
  int vs_expert = 0;
  for (const auto& [id, p] : problems) {
    if (!p.has_expert) continue;
    ++g.expert_problems;
    if (p.best_expert) {
      log_expert += std::log(*p.best_expert);
      ++vs_expert;
    }
  }
  if (g.expert_problems > 0) {
    for (double threshold : options.ps) {
      if (threshold == 0) continue;
      int fast = 0;
      for (const auto& [id, p] : problems)
        if (p.has_expert && p.best_expert && *p.best_expert > threshold) ++fast;
      g.expert_fast_p.emplace_back(threshold, static_cast<double>(fast) / g.expert_problems);
    }
    int parity = 0;
    for (const auto& [id, p] : problems)
      if (p.has_expert && p.best_expert && *p.best_expert >= 1) ++parity;
    g.human_parity = static_cast<double>(parity) / g.expert_problems;
    if (vs_expert > 0) g.geomean_vs_expert = std::exp(log_expert / vs_expert);
  }
  g.geomean_all = std::exp(log_all / np);
  if (g.solved > 0) {
    g.tokens_per_solved = static_cast<double>(judged_tokens) / g.solved;
    g.cost_per_solved = judged_usd / g.solved;
  }
  return g;
}

}  // namespace

double PassAtK(int n, int c, int k) {
  if (n <= 0 || k <= 0 || k > n || c < 0 || c > n) return std::numeric_limits<double>::quiet_NaN();
  if (n - c < k) return 1.0;
  // C(n-c,k)/C(n,k) = prod_{i=n-c+1}^{n} (1 - k/i)
  double miss = 1.0;
  for (int i = n - c + 1; i <= n; ++i) miss *= 1.0 - static_cast<double>(k) / i;
  return 1.0 - miss;
}

Result<std::vector<std::string>> ParseGroupBy(std::string_view spec) {
  std::vector<std::string> dims;
  for (const std::string& dim : Split(spec, ',')) {
    if (std::find(std::begin(kDimensions), std::end(kDimensions), dim) == std::end(kDimensions)) {
      return Error(ErrorKind::kInvalidInput,
                   "--by: unknown dimension \"" + dim +
                       "\" (use run, model, strategy, category, world, dtype)");
    }
    dims.push_back(dim);
  }
  if (dims.empty()) return Error(ErrorKind::kInvalidInput, "--by: no dimension given");
  return dims;
}

std::string DimensionValue(const SampleOutcome& s, const std::string& dimension) {
  if (dimension == "run") return s.run;
  if (dimension == "model") return s.model;
  if (dimension == "strategy") return s.strategy;
  if (dimension == "category") return s.category;
  if (dimension == "world") return std::to_string(s.world);
  if (dimension == "dtype") return s.dtype;
  return "";
}

double GroupMetrics::FastP(double p) const {
  for (const auto& [threshold, value] : fast_p) {
    if (threshold == p) return value;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::vector<GroupMetrics> ComputeMetrics(const std::vector<SampleOutcome>& samples,
                                         const MetricsOptions& options) {
  // (emulated?, key values) -> members; std::map keeps the output deterministic.
  std::map<std::pair<bool, std::vector<std::string>>, std::vector<const SampleOutcome*>> groups;
  // A task has an expert when any sample was timed beside it (a task's
  // [expert] does not change within one task suite).
  std::set<std::string> expert_tasks;
  for (const auto& s : samples)
    if (s.expert_speedup) expert_tasks.insert(s.task);
  for (const auto& s : samples) {
    if (s.emulated && options.emulated == EmulatedPolicy::kExclude) continue;
    const bool separate = s.emulated && options.emulated == EmulatedPolicy::kSeparate;
    std::vector<std::string> values;
    for (const auto& dim : options.group_by) values.push_back(DimensionValue(s, dim));
    groups[{separate, values}].push_back(&s);
  }
  std::vector<GroupMetrics> rows;
  for (const auto& [key, members] : groups) {
    GroupMetrics g = Summarise(members, options, expert_tasks);
    g.emulated = key.first;
    for (size_t i = 0; i < options.group_by.size(); ++i) {
      g.key.emplace_back(options.group_by[i], key.second[i]);
      g.label += (i ? " / " : "") + key.second[i];
    }
    rows.push_back(std::move(g));
  }
  std::stable_sort(rows.begin(), rows.end(), [](const GroupMetrics& a, const GroupMetrics& b) {
    const bool a_sep = a.emulated, b_sep = b.emulated;
    if (a_sep != b_sep) return !a_sep;
    if (a.evaluated() != b.evaluated()) return a.evaluated();
    const double fa = a.FastP(1), fb = b.FastP(1);
    if (!std::isnan(fa) && !std::isnan(fb) && fa != fb) return fa > fb;
    if (a.correct_rate != b.correct_rate) return a.correct_rate > b.correct_rate;
    if (a.geomean_all != b.geomean_all) return a.geomean_all > b.geomean_all;
    return a.label < b.label;
  });
  return rows;
}

}  // namespace kforge::results
