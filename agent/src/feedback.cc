#include "feedback.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <sstream>
#include <vector>

#include "feedback_profile.h"
#include "kforge/core/json.h"
#include "kforge/evaluator/diagnostics.h"
#include "template.h"

namespace kforge::agent {
namespace {

using nlohmann::json;

constexpr size_t kMaxDiagnostics = 6;
constexpr size_t kMaxMismatches = 6;
constexpr size_t kMaxLogLines = 30;
constexpr size_t kMaxResourceLines = 6;
constexpr int64_t kMaxInt = std::numeric_limits<int>::max();

std::string Num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.4g}", v);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string JoinInts(const json& arr) {
  std::string out;
  if (!arr.is_array()) return out;
  for (const auto& v : arr) {
    if (!out.empty()) out += ", ";
    out += v.is_number() ? std::to_string(v.get<int64_t>()) : v.dump();
  }
  return out;
}

json CompileView(const FeedbackInput& in) {
  json view = json::object();
  const json compile = in.eval.value("compile", json::object());
  std::vector<std::string> src = Lines(in.source);
  json errors = json::array();
  std::set<std::pair<int, std::string>> seen;
  size_t total = 0;
  for (const auto& d : compile.value("diagnostics", json::array())) {
    if (!d.is_object() || JsonString(d, "severity") == "warning" ||
        JsonString(d, "severity") == "note")
      continue;
    int line = static_cast<int>(JsonIntIn(d, "line", 0, kMaxInt, 0));
    std::string message = JsonString(d, "message");
    if (!seen.insert({line, message}).second) continue;
    ++total;
    if (errors.size() >= kMaxDiagnostics) continue;
    // column 0 means unknown: left out, so that {{#column}} stays false.
    const int column = static_cast<int>(JsonIntIn(d, "column", 0, kMaxInt, 0));
    json e = {{"line", line}, {"message", message}, {"file", JsonString(d, "file")}};
    if (column > 0) e["column"] = column;
    std::string file = JsonString(d, "file");
    bool ours =
        file.empty() || file == in.kernel_name ||
        std::filesystem::path(file).filename() == std::filesystem::path(in.kernel_name).filename();
    if (ours && line >= 1 && static_cast<size_t>(line) <= src.size()) {
      e["source_line"] = src[line - 1];
      std::string caret = eval::CaretLine(src[line - 1], column);
      if (!caret.empty()) e["caret"] = caret;
    }
    errors.push_back(e);
  }
  view["errors"] = errors;
  if (total > errors.size()) view["more_errors"] = static_cast<int>(total - errors.size());
  if (errors.empty()) {
    std::vector<std::string> log = Lines(JsonString(compile, "log"));
    if (log.size() > kMaxLogLines) log.resize(kMaxLogLines);
    std::string excerpt;
    for (const auto& l : log) excerpt += l + "\n";
    view["log"] = excerpt;
  }
  return view;
}

json MismatchView(const json& eval) {
  json out = json::array();
  std::set<std::string> failing_ranks;
  std::set<std::string> seen;
  int failed_checks = 0;
  const json correctness = eval.value("correctness", json::object());
  for (const auto& check : correctness.value("checks", json::array())) {
    if (!check.is_object() || check.value("passed", true)) continue;
    ++failed_checks;
    for (const auto& m : check.value("mismatches", json::array())) {
      int rank = static_cast<int>(JsonIntIn(m, "rank", -1, kMaxInt, -1));
      failing_ranks.insert(std::to_string(rank));
      std::string key =
          fmt::format("{}/{}/{}", JsonString(check, "size"), rank, JsonString(m, "output"));
      if (!seen.insert(key).second || out.size() >= kMaxMismatches) continue;
      json first_bad = json::array();
      for (const auto& fb : m.value("first_bad", json::array())) {
        if (first_bad.size() >= 4) break;
        first_bad.push_back({{"index", "[" + JoinInts(fb.value("index", json::array())) + "]"},
                             {"got", Num(JsonNumber(fb, "got", NAN))},
                             {"expected", Num(JsonNumber(fb, "expected", NAN))}});
      }
      json hints = json::array();
      for (const auto& h : m.value("hints", json::array())) {
        if (h.is_string()) hints.push_back(h);
      }
      out.push_back({{"size", JsonString(check, "size")},
                     {"trial", static_cast<int>(JsonIntIn(check, "trial", 0, kMaxInt, 0))},
                     {"rank", rank},
                     {"output", JsonString(m, "output")},
                     {"bad_count", JsonIntIn(m, "bad_count", 0, INT64_MAX, 0)},
                     {"nan_count", JsonIntIn(m, "nan_count", 0, INT64_MAX, 0)},
                     {"has_nan", JsonNumber(m, "nan_count", 0) > 0},
                     {"max_abs_err", Num(JsonNumber(m, "max_abs_err", NAN))},
                     {"max_rel_err", Num(JsonNumber(m, "max_rel_err", NAN))},
                     {"first_bad", first_bad},
                     {"hints", hints},
                     {"has_hints", !hints.empty()}});
    }
  }
  std::string ranks;
  for (const auto& r : failing_ranks) ranks += (ranks.empty() ? "" : ", ") + r;
  return {
      {"items", out},
      {"failing_ranks", ranks},
      {"failed_checks", failed_checks},
      {"trials", static_cast<int>(JsonIntIn(correctness, "trials", 0, kMaxInt, 0))},
      {"passed_trials", static_cast<int>(JsonIntIn(correctness, "passed_trials", 0, kMaxInt, 0))}};
}

json TimingView(const json& eval, double link_peak_gbps) {
  json rows = json::array();
  for (const auto& t : eval.value("timing", json::array())) {
    if (!t.is_object()) continue;
    const json base = t.value("baseline", json::object());
    const json cand = t.value("candidate", json::object());
    json row = {{"size", JsonString(t, "size")},
                {"baseline_us", Num(JsonNumber(base, "median_us", NAN))},
                {"candidate_us", Num(JsonNumber(cand, "median_us", NAN))},
                {"speedup", Num(JsonNumber(t, "speedup", NAN))},
                {"busbw_gbps", Num(JsonNumber(t, "busbw_gbps", NAN))},
                {"baseline_busbw_gbps", Num(JsonNumber(t, "baseline_busbw_gbps", NAN))},
                {"candidate_cv", Num(JsonNumber(cand, "cv", NAN))}};
    if (link_peak_gbps > 0 && t.contains("busbw_gbps")) {
      row["busbw_pct_of_peak"] = Num(100.0 * JsonNumber(t, "busbw_gbps") / link_peak_gbps);
    }
    // Optional per-rank medians: skew = (slowest - fastest) / fastest.
    const json per_rank = cand.value("rank_median_us", json::array());
    if (per_rank.is_array() && per_rank.size() > 1) {
      double lo = INFINITY, hi = 0;
      for (const auto& v : per_rank) {
        if (!v.is_number()) continue;
        lo = std::min(lo, v.get<double>());
        hi = std::max(hi, v.get<double>());
      }
      if (lo > 0 && std::isfinite(lo)) row["rank_skew_pct"] = Num(100.0 * (hi - lo) / lo);
    }
    // How close the call is to its physical floor (the task's bytes and flops
    // at the GPU's peaks): what a profiler's speed-of-light section says.
    const json roofline = t.value("roofline", json::object());
    if (roofline.is_object() && JsonNumber(roofline, "fraction", 0) > 0) {
      row["floor"] = {{"us", Num(JsonNumber(roofline, "floor_us", NAN))},
                      {"bound", JsonString(roofline, "bound")},
                      {"pct", Num(100 * JsonNumber(roofline, "fraction", NAN))},
                      {"baseline_pct", Num(100 * JsonNumber(roofline, "baseline_fraction", NAN))}};
    }
    // The best known human kernel for the task, timed beside the baseline.
    const json expert = t.value("expert", json());
    if (expert.is_object() && JsonNumber(expert, "median_us", 0) > 0) {
      row["expert"] = {{"us", Num(JsonNumber(expert, "median_us", NAN))},
                       {"speedup", Num(JsonNumber(expert, "speedup", NAN))},
                       {"over_baseline", Num(JsonNumber(expert, "over_baseline", NAN))}};
    }
    json warnings = json::array();
    for (const auto& w : t.value("warnings", json::array())) {
      if (w.is_string()) warnings.push_back(w);
    }
    row["warnings"] = warnings;
    rows.push_back(row);
  }
  return rows;
}

// "name: summary" for each function ptxas reported (compile.resources), the
// first kMaxResourceLines.
json ResourcesView(const json& eval) {
  json lines = json::array();
  const json compile = eval.value("compile", json::object());
  const json items = compile.is_object() ? compile.value("resources", json::array()) : json();
  if (!items.is_array()) return lines;
  for (const auto& k : items) {
    if (lines.size() >= kMaxResourceLines) break;
    if (k.is_object()) lines.push_back(JsonString(k, "name") + ": " + JsonString(k, "summary"));
  }
  return lines;
}

}  // namespace

json FeedbackView(const FeedbackInput& in) {
  const json& e = in.eval;
  json view = {{"outcome", std::string(OutcomeName(in.outcome))},
               {"turn", in.turn},
               {"turns", in.turns},
               {"turns_left", std::max(0, in.turns - in.turn)},
               {"last_turn", in.turn >= in.turns},
               {"status", JsonString(e, "status")},
               {"message", JsonString(e, "message")},
               {"emulated", e.value("emulated", false)},
               {"world", static_cast<int>(JsonIntIn(e, "world", 0, kMaxInt, 0))},
               {"dtype", JsonString(e, "dtype")},
               {"extract_problem", in.extract_problem}};
  if (in.outcome == Outcome::kCompileError) view["compile"] = CompileView(in);
  json violations = json::array();
  if (e.contains("policy") && e["policy"].is_object()) {
    for (const auto& v : e["policy"].value("violations", json::array())) {
      if (v.is_string()) violations.push_back(v);
    }
  }
  view["violations"] = violations;
  if (e.contains("error") && e["error"].is_object()) {
    const json& err = e["error"];
    view["error"] = {{"phase", JsonString(err, "phase")},
                     {"rank", static_cast<int>(JsonIntIn(err, "rank", -1, kMaxInt, -1))},
                     {"message", JsonString(err, "message")}};
  }
  if (e.contains("timeout") && e["timeout"].is_object()) {
    const json& t = e["timeout"];
    view["hang"] = {{"phase", JsonString(t, "phase")},
                    {"deadline_s", Num(JsonNumber(t, "deadline_s", NAN))},
                    {"hung_ranks", JoinInts(t.value("hung_ranks", json::array()))}};
  }
  view["mismatch"] = MismatchView(e);
  view["timing"] = TimingView(e, in.link_peak_gbps);
  view["resources"] = ResourcesView(e);
  view["has_resources"] = !view["resources"].empty();
  if (json profile = ProfileView(e); !profile.is_null()) view["profile"] = std::move(profile);
  if (e.contains("speedup") && e["speedup"].is_number())
    view["speedup"] = Num(e["speedup"].get<double>());
  if (e.contains("expert_speedup") && e["expert_speedup"].is_number()) {
    view["expert_speedup"] = Num(e["expert_speedup"].get<double>());
    const json& ex = e.value("expert", json());
    view["expert_technique"] = ex.is_object() ? JsonString(ex, "technique") : "";
  }
  return view;
}

Result<std::string> ComposeFeedback(const Strategy& strategy, const FeedbackInput& in) {
  auto it = strategy.feedback_templates.find(in.outcome);
  if (it == strategy.feedback_templates.end()) {
    return Error(ErrorKind::kInternal, fmt::format("strategy {} has no feedback template for {}",
                                                   strategy.name, OutcomeName(in.outcome)));
  }
  return RenderTemplate(
      it->second, FeedbackView(in),
      fmt::format("{} feedback.{}", strategy.path.string(), OutcomeName(in.outcome)));
}

}  // namespace kforge::agent
