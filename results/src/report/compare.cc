#include "kforge/results/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "kforge/core/stats.h"
#include "kforge/core/strings.h"
#include "kforge/results/metrics.h"

namespace kforge::results {

namespace fs = std::filesystem;

namespace {

std::map<std::string, ProblemSide> BestPerProblem(const std::vector<SampleOutcome>& samples,
                                                  bool include_emulated, int* excluded,
                                                  int* not_evaluated) {
  std::map<std::string, ProblemSide> out;
  std::map<std::string, double> best;  // best correct, timed speedup
  for (const auto& s : samples) {
    // Nothing judged it: neither a win nor a loss (metrics.h).
    if (s.not_evaluated) {
      ++*not_evaluated;
      continue;
    }
    if (s.emulated && !include_emulated) {
      ++*excluded;
      continue;
    }
    const std::string name = fmt::format("{}/w{}/{}", s.task, s.world, s.dtype);
    ProblemSide& p = out[name];
    if (!s.correct) continue;
    p.correct = true;
    if (s.speedup) best[name] = std::max(best[name], *s.speedup);
    if (s.expert_speedup) {
      p.expert = true;
      p.vs_expert = std::max(p.vs_expert.value_or(0), *s.expert_speedup);
    }
  }
  for (const auto& [name, speedup] : best) {
    out[name].speedup = speedup;
    out[name].fast1 = speedup > 1.0;
  }
  return out;
}

std::string Sentence(const std::string& metric, const Interval& iv, const std::string& a,
                     const std::string& b, const std::string& est, const std::string& lo,
                     const std::string& hi, double conf) {
  const std::string ci = fmt::format("{:.0f}% CI [{}, {}]", conf * 100, lo, hi);
  if (!iv.significant) {
    return fmt::format("{}: no significant difference between {} and {} ({} {}, {}).", metric, a, b,
                       metric == "fast_1" ? "difference" : "ratio", est, ci);
  }
  const bool a_better = metric == "fast_1" ? iv.estimate > 0 : iv.estimate > 1;
  return fmt::format("{}: {} is better than {} ({} {}, {}).", metric, a_better ? a : b,
                     a_better ? b : a, metric == "fast_1" ? "difference" : "ratio", est, ci);
}

}  // namespace

Status ValidateCompareOptions(const CompareOptions& o) {
  if (!(o.confidence > 0 && o.confidence < 1))
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("--confidence {:g}: expected a level between 0 and 1, e.g. 0.95",
                             o.confidence));
  if (o.resamples < 100)
    return Error(
        ErrorKind::kInvalidInput,
        fmt::format("--resamples {}: expected at least 100 (2000 is the default)", o.resamples));
  if (!(o.tie_tolerance >= 0))
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("tie tolerance {:g}: expected >= 0", o.tie_tolerance));
  return Status::Ok();
}

namespace {

const std::set<std::string> kFilterKeys = {"model", "strategy", "category", "world", "dtype"};

// Where a filter "KEY=" begins at `pos`, for a known key.
bool FilterStartsAt(const std::string& spec, size_t pos) {
  const auto eq = spec.find('=', pos);
  return eq != std::string::npos && kFilterKeys.count(spec.substr(pos, eq - pos)) > 0;
}

// Model specs hold colons ("openai:gpt-5.5", "compat:http://host:8000/v1#m"),
// so neither the run/filter boundary nor the boundary between filters is the
// first separator: a filter starts only where a known "KEY=" follows it.
std::vector<std::string> SplitFilters(const std::string& filters) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < filters.size(); ++i) {
    if (filters[i] == ',' && FilterStartsAt(filters, i + 1)) {
      out.push_back(filters.substr(start, i - start));
      start = i + 1;
    }
  }
  out.push_back(filters.substr(start));
  return out;
}

}  // namespace

Result<Selector> ParseSelector(const std::string& spec, const fs::path& runs_root,
                               const std::vector<fs::path>& default_runs) {
  Selector sel;
  sel.label = spec;
  std::string run_part, filter_part;
  if (FilterStartsAt(spec, 0)) {
    filter_part = spec;
  } else {
    // RUN:KEY=...: the first colon followed by a known key; a colon inside a
    // run path or a misspelled key leaves the whole spec to the run lookup
    // or to the bad-filter message below.
    size_t colon = spec.find(':');
    while (colon != std::string::npos && !FilterStartsAt(spec, colon + 1)) {
      colon = spec.find(':', colon + 1);
    }
    if (colon == std::string::npos) colon = spec.find(':');  // RUN:bad=filter
    if (colon != std::string::npos) {
      run_part = spec.substr(0, colon);
      filter_part = spec.substr(colon + 1);
    } else if (spec.find('=') != std::string::npos) {
      filter_part = spec;
    } else {
      run_part = spec;
    }
  }
  if (!run_part.empty()) {
    KF_ASSIGN_OR_RETURN(fs::path dir, ResolveRunDir(run_part, runs_root));
    sel.run_dirs.push_back(dir);
  } else {
    if (default_runs.empty()) {
      return Error(ErrorKind::kInvalidInput,
                   "\"" + spec + "\" names no run: write RUN:" + spec + " or pass --run");
    }
    sel.run_dirs = default_runs;
  }
  for (const std::string& item : SplitFilters(filter_part)) {
    if (item.empty() && filter_part.empty()) break;
    const auto eq = item.find('=');
    if (eq == std::string::npos || !kFilterKeys.count(item.substr(0, eq))) {
      return Error(ErrorKind::kInvalidInput,
                   "\"" + spec + "\": bad filter \"" + item +
                       "\" (use model=, strategy=, category=, world=, dtype=)");
    }
    sel.filters[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return sel;
}

bool Matches(const Selector& selector, const SampleOutcome& sample) {
  for (const auto& [key, value] : selector.filters) {
    if (DimensionValue(sample, key) != value) return false;
  }
  return true;
}

Comparison Compare(const std::vector<SampleOutcome>& a, const std::vector<SampleOutcome>& b,
                   const std::string& a_label, const std::string& b_label,
                   const CompareOptions& options) {
  Comparison c;
  c.a_label = a_label;
  c.b_label = b_label;
  c.resamples = options.resamples;
  c.seed = options.seed;
  c.confidence = options.confidence;
  const auto pa =
      BestPerProblem(a, options.include_emulated, &c.excluded_emulated, &c.not_evaluated_a);
  const auto pb =
      BestPerProblem(b, options.include_emulated, &c.excluded_emulated, &c.not_evaluated_b);
  const double tol = std::log1p(options.tie_tolerance);
  for (const auto& [name, sa] : pa) {
    auto it = pb.find(name);
    if (it == pb.end()) {
      ++c.only_a;
      continue;
    }
    ProblemComparison pc{name, sa, it->second, 0};
    if (sa.correct != pc.b.correct) {
      pc.outcome = sa.correct ? 1 : -1;
    } else if (sa.correct) {
      const double d = std::log(sa.speedup) - std::log(pc.b.speedup);
      pc.outcome = d > tol ? 1 : (d < -tol ? -1 : 0);
    }
    (pc.outcome > 0 ? c.wins : pc.outcome < 0 ? c.losses : c.ties)++;
    if (sa.expert || pc.b.expert) {
      ++c.expert_problems;
      c.parity_a += sa.vs_expert && *sa.vs_expert >= 1 ? 1 : 0;
      c.parity_b += pc.b.vs_expert && *pc.b.vs_expert >= 1 ? 1 : 0;
    }
    c.problems.push_back(pc);
  }
  for (const auto& [name, sb] : pb) c.only_b += pa.count(name) ? 0 : 1;

  const size_t n = c.problems.size();
  std::vector<double> dfast(n), dlog(n);
  for (size_t i = 0; i < n; ++i) {
    dfast[i] = (c.problems[i].a.fast1 ? 1.0 : 0.0) - (c.problems[i].b.fast1 ? 1.0 : 0.0);
    dlog[i] = std::log(c.problems[i].a.speedup) - std::log(c.problems[i].b.speedup);
  }
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
  };
  c.fast1_diff.estimate = mean(dfast);
  const double log_ratio = mean(dlog);
  std::vector<double> boot_fast, boot_log;
  if (n > 0 && options.resamples > 0) {
    SplitMix64 rng(options.seed);
    boot_fast.reserve(options.resamples);
    boot_log.reserve(options.resamples);
    for (int r = 0; r < options.resamples; ++r) {
      double sf = 0, sl = 0;
      for (size_t j = 0; j < n; ++j) {
        const size_t i = rng.Below(n);
        sf += dfast[i];
        sl += dlog[i];
      }
      boot_fast.push_back(sf / static_cast<double>(n));
      boot_log.push_back(sl / static_cast<double>(n));
    }
  }
  const double alpha = (1 - options.confidence) / 2;
  c.fast1_diff.lo = Quantile(boot_fast, alpha);
  c.fast1_diff.hi = Quantile(boot_fast, 1 - alpha);
  c.fast1_diff.significant = n > 0 && (c.fast1_diff.lo > 0 || c.fast1_diff.hi < 0);
  c.geomean_ratio.estimate = std::exp(log_ratio);
  c.geomean_ratio.lo = std::exp(Quantile(boot_log, alpha));
  c.geomean_ratio.hi = std::exp(Quantile(boot_log, 1 - alpha));
  c.geomean_ratio.significant = n > 0 && (c.geomean_ratio.lo > 1 || c.geomean_ratio.hi < 1);

  if (n == 0) {
    c.verdict = c.not_evaluated_a || c.not_evaluated_b
                    ? "No problem was evaluated on both sides: nothing to compare."
                    : "No problem was attempted by both sides: nothing to compare.";
    return c;
  }
  c.verdict = Sentence("fast_1", c.fast1_diff, a_label, b_label,
                       fmt::format("{:+.3f}", c.fast1_diff.estimate),
                       fmt::format("{:+.3f}", c.fast1_diff.lo),
                       fmt::format("{:+.3f}", c.fast1_diff.hi), options.confidence) +
              "\n" +
              Sentence("geomean speedup", c.geomean_ratio, a_label, b_label,
                       fmt::format("{:.3f}x", c.geomean_ratio.estimate),
                       fmt::format("{:.3f}x", c.geomean_ratio.lo),
                       fmt::format("{:.3f}x", c.geomean_ratio.hi), options.confidence);
  if (n < 10)
    c.verdict += fmt::format("\nOnly {} paired problems: intervals this wide are expected.", n);
  return c;
}

std::string RenderComparisonText(const Comparison& c) {
  std::string out = fmt::format("A = {}\nB = {}\n\n{:<32} {:>14} {:>14}  result\n", c.a_label,
                                c.b_label, "problem", "A", "B");
  auto side = [](const ProblemSide& s) {
    return s.correct ? fmt::format("{:.3f}x", s.speedup) : std::string("incorrect");
  };
  for (const auto& p : c.problems) {
    out += fmt::format("{:<32} {:>14} {:>14}  {}\n", p.problem, side(p.a), side(p.b),
                       p.outcome > 0   ? "A wins"
                       : p.outcome < 0 ? "B wins"
                                       : "tie");
  }
  out += fmt::format("\nA wins {}, B wins {}, ties {} over {} paired problems", c.wins, c.losses,
                     c.ties, c.problems.size());
  if (c.only_a || c.only_b)
    out += fmt::format(" ({} only in A, {} only in B: not compared)", c.only_a, c.only_b);
  if (c.excluded_emulated)
    out += fmt::format("; {} emulated sessions left out", c.excluded_emulated);
  if (c.not_evaluated_a || c.not_evaluated_b)
    out += fmt::format("; sessions not evaluated (left out): {} in A, {} in B", c.not_evaluated_a,
                       c.not_evaluated_b);
  out += ".\n";
  if (c.expert_problems > 0) {
    out += fmt::format(
        "Human parity (a correct kernel at least as fast as the task's expert kernel), over {} "
        "paired problems with one: A {}, B {}.\n",
        c.expert_problems, c.parity_a, c.parity_b);
  }
  out += fmt::format("Paired bootstrap: {} resamples of problems, seed {}.\n\n{}\n", c.resamples,
                     c.seed, c.verdict);
  return out;
}

std::string RenderComparisonJson(const Comparison& c) {
  nlohmann::ordered_json j;
  j["schema"] = "kforge.compare/1";
  j["a"] = c.a_label;
  j["b"] = c.b_label;
  j["wins"] = c.wins;
  j["losses"] = c.losses;
  j["ties"] = c.ties;
  j["only_a"] = c.only_a;
  j["only_b"] = c.only_b;
  j["excluded_emulated"] = c.excluded_emulated;
  j["not_evaluated_a"] = c.not_evaluated_a;
  j["not_evaluated_b"] = c.not_evaluated_b;
  auto iv = [](const Interval& i) {
    return nlohmann::ordered_json{
        {"estimate", i.estimate}, {"lo", i.lo}, {"hi", i.hi}, {"significant", i.significant}};
  };
  j["fast1_diff"] = iv(c.fast1_diff);
  j["geomean_ratio"] = iv(c.geomean_ratio);
  j["bootstrap"] = {{"resamples", c.resamples}, {"seed", c.seed}, {"confidence", c.confidence}};
  j["problems"] = nlohmann::ordered_json::array();
  for (const auto& p : c.problems) {
    j["problems"].push_back({{"problem", p.problem},
                             {"a_correct", p.a.correct},
                             {"a_speedup", p.a.speedup},
                             {"b_correct", p.b.correct},
                             {"b_speedup", p.b.speedup},
                             {"a_vs_expert", p.a.vs_expert ? nlohmann::ordered_json(*p.a.vs_expert)
                                                           : nlohmann::ordered_json(nullptr)},
                             {"b_vs_expert", p.b.vs_expert ? nlohmann::ordered_json(*p.b.vs_expert)
                                                           : nlohmann::ordered_json(nullptr)},
                             {"outcome", p.outcome}});
  }
  j["human_parity"] = {{"problems", c.expert_problems}, {"a", c.parity_a}, {"b", c.parity_b}};
  j["verdict"] = c.verdict;
  return j.dump(2) + "\n";
}

}  // namespace kforge::results
