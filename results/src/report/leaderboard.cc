#include "kforge/results/leaderboard.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

namespace kforge::results {

namespace {

// The k values some row reports, ascending.
std::vector<int> ReportedKs(const Leaderboard& board) {
  std::set<int> ks;
  for (const auto& r : board.rows) {
    for (const auto& [k, v] : r.pass_at_k) ks.insert(k);
  }
  return {ks.begin(), ks.end()};
}

std::optional<double> AtK(const std::vector<std::pair<int, double>>& values, int k) {
  for (const auto& [kk, v] : values) {
    if (kk == k) return v;
  }
  return std::nullopt;
}

std::string Pct(std::optional<double> v) { return v ? fmt::format("{:.1f}%", *v * 100) : "—"; }
std::string X(std::optional<double> v) { return v ? fmt::format("{:.3f}x", *v) : "—"; }
std::string Num(std::optional<double> v, int digits) {
  return v ? fmt::format("{:.{}f}", *v, digits) : "";
}

// Whether any row's tasks had their expert kernel timed: the expert columns
// and their note appear only then.
bool AnyExpert(const Leaderboard& board) {
  return std::any_of(board.rows.begin(), board.rows.end(),
                     [](const GroupMetrics& r) { return r.expert_problems > 0; });
}

}  // namespace

LeaderboardTable BuildLeaderboardTable(const Leaderboard& board, bool human) {
  LeaderboardTable t;
  for (const auto& dim : board.options.group_by) t.header.push_back(dim);
  t.header.insert(t.header.end(), {"timings", "problems", "samples", "correct"});
  for (double p : board.options.ps) {
    if (p != 0) t.header.push_back(fmt::format("fast_{:g}", p));
  }
  const auto ks = ReportedKs(board);
  for (int k : ks) t.header.push_back(fmt::format("pass@{}", k));
  for (int k : ks) t.header.push_back(fmt::format("fast1@{}", k));
  t.header.insert(t.header.end(), {"geomean_correct", "geomean_all"});
  // Against the tasks' expert kernels, where any was timed (docs/results.md).
  const bool experts = AnyExpert(board);
  if (experts) t.header.insert(t.header.end(), {"expert_problems", "human_parity", "vs_expert"});
  t.header.insert(t.header.end(),
                  {"tokens_per_solved", "usd_per_solved", "usd_total", "wall_h", "not_evaluated"});
  for (const auto& r : board.rows) {
    std::vector<std::string> cells;
    for (const auto& [dim, value] : r.key) cells.push_back(value);
    cells.push_back(!r.evaluated() ? "none"
                    : r.emulated   ? "emulated"
                                   : (r.includes_emulated ? "mixed" : "real"));
    cells.push_back(std::to_string(r.problems));
    cells.push_back(std::to_string(r.samples));
    // A row with nothing evaluated has no figures: blank, never 0%.
    auto frac = [&](std::optional<double> v) {
      if (!r.evaluated()) v.reset();
      return human ? Pct(v) : Num(v, 4);
    };
    auto ratio = [&](std::optional<double> v) {
      if (!r.evaluated()) v.reset();
      return human ? X(v) : Num(v, 4);
    };
    cells.push_back(r.evaluated() ? frac(r.correct_rate)
                                  : (human ? std::string("not evaluated") : std::string()));
    for (double p : board.options.ps) {
      if (p != 0) cells.push_back(frac(r.FastP(p)));
    }
    for (int k : ks) cells.push_back(frac(AtK(r.pass_at_k, k)));
    for (int k : ks) cells.push_back(frac(AtK(r.fast1_at_k, k)));
    cells.push_back(ratio(r.geomean_correct));
    cells.push_back(ratio(r.geomean_all));
    if (experts) {
      cells.push_back(std::to_string(r.expert_problems));
      cells.push_back(frac(r.human_parity));
      cells.push_back(ratio(r.geomean_vs_expert));
    }
    cells.push_back(human
                        ? (r.tokens_per_solved ? fmt::format("{:.0f}", *r.tokens_per_solved) : "—")
                        : Num(r.tokens_per_solved, 1));
    cells.push_back(human ? (r.cost_per_solved ? fmt::format("${:.3f}", *r.cost_per_solved) : "—")
                          : Num(r.cost_per_solved, 4));
    cells.push_back(human ? fmt::format("${:.2f}", r.cost_usd) : Num(r.cost_usd, 4));
    cells.push_back(Num(r.wall_s / 3600, 2));
    cells.push_back(std::to_string(r.not_evaluated));
    t.rows.push_back(std::move(cells));
  }
  return t;
}

namespace {

std::string CsvCell(const std::string& v) {
  if (v.find_first_of(",\"\n") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

nlohmann::json OptJson(std::optional<double> v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

const char* PolicyName(EmulatedPolicy p) {
  switch (p) {
    case EmulatedPolicy::kSeparate:
      return "separate";
    case EmulatedPolicy::kExclude:
      return "exclude";
    case EmulatedPolicy::kInclude:
      return "include";
  }
  return "separate";
}

std::vector<const SampleOutcome*> NotEvaluatedSamples(const Leaderboard& board) {
  std::vector<const SampleOutcome*> out;
  for (const auto& s : board.samples) {
    if (s.not_evaluated) out.push_back(&s);
  }
  return out;
}

}  // namespace

std::string NotEvaluatedNote(const Leaderboard& board) {
  const auto missing = NotEvaluatedSamples(board);
  if (missing.empty()) return "";
  std::string out = fmt::format("\nNot evaluated ({} session{}; left out of every figure above):\n",
                                missing.size(), missing.size() == 1 ? "" : "s");
  for (const auto* s : missing) {
    out += fmt::format("- {} / {} / {} (sample {}): {}\n", s->run, s->model, s->task, s->sample,
                       s->not_evaluated_reason);
  }
  return out;
}

Result<LeaderboardFormat> ParseLeaderboardFormat(std::string_view name) {
  if (name == "md" || name == "markdown") return LeaderboardFormat::kMarkdown;
  if (name == "json") return LeaderboardFormat::kJson;
  if (name == "csv") return LeaderboardFormat::kCsv;
  if (name == "html") return LeaderboardFormat::kHtml;
  return Error(ErrorKind::kInvalidInput,
               "--format: unknown format \"" + std::string(name) + "\" (md, json, csv, html)");
}

Leaderboard BuildLeaderboard(std::vector<SampleOutcome> samples, const MetricsOptions& options) {
  Leaderboard board;
  board.options = options;
  std::set<std::string> runs;
  for (const auto& s : samples) runs.insert(s.run);
  board.runs.assign(runs.begin(), runs.end());
  board.rows = ComputeMetrics(samples, options);
  board.samples = std::move(samples);
  return board;
}

std::string RenderMarkdown(const Leaderboard& board) {
  const LeaderboardTable t = BuildLeaderboardTable(board, /*human=*/true);
  std::string out =
      "# kforge leaderboard\n\nRuns: " + fmt::format("{}", fmt::join(board.runs, ", ")) + "\n\n";
  out += "| " + fmt::format("{}", fmt::join(t.header, " | ")) + " |\n|";
  for (size_t i = 0; i < t.header.size(); ++i)
    out += i < board.options.group_by.size() ? "---|" : "---:|";
  out += "\n";
  for (const auto& row : t.rows) out += "| " + fmt::format("{}", fmt::join(row, " | ")) + " |\n";
  if (t.rows.empty()) out += "\n(no evaluated sessions)\n";
  out += NotEvaluatedNote(board);
  out +=
      "\nA problem is (task, world, dtype). correct = fast_0; fast_p = share of problems with a "
      "correct sample "
      "faster than p x the NCCL baseline. geomean_correct: over correct, timed problems only; "
      "geomean_all: "
      "every problem, an incorrect one counted as 1.0x. Rows marked `emulated` ran with ranks "
      "sharing a GPU: "
      "their timings are not NVLink timings and are kept apart.\n";
  if (AnyExpert(board)) {
    out +=
        "\nexpert_problems: problems whose task has an expert kernel (the best known human "
        "kernel, timed beside the baseline); human_parity: share of them with a correct sample at "
        "least as fast as the expert; vs_expert: geomean of the best correct sample's speed over "
        "the expert's.\n";
  }
  return out;
}

std::string RenderCsv(const Leaderboard& board) {
  const LeaderboardTable t = BuildLeaderboardTable(board, /*human=*/false);
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + CsvCell(cells[i]);
    out += "\n";
  };
  line(t.header);
  for (const auto& row : t.rows) line(row);
  return out;
}

std::string RenderJson(const Leaderboard& board) {
  nlohmann::ordered_json doc;
  doc["schema"] = "kforge.leaderboard/1";
  doc["runs"] = board.runs;
  doc["group_by"] = board.options.group_by;
  doc["emulated_policy"] = PolicyName(board.options.emulated);
  doc["rows"] = nlohmann::ordered_json::array();
  for (const auto& r : board.rows) {
    nlohmann::ordered_json row;
    for (const auto& [dim, value] : r.key) row[dim] = value;
    row["label"] = r.label;
    row["emulated"] = r.emulated;
    row["includes_emulated"] = r.includes_emulated;
    row["problems"] = r.problems;
    row["samples"] = r.samples;
    row["not_evaluated"] = r.not_evaluated;
    row["evaluated"] = r.evaluated();
    row["solved"] = r.solved;
    row["correct_rate"] =
        r.evaluated() ? nlohmann::ordered_json(r.correct_rate) : nlohmann::ordered_json(nullptr);
    nlohmann::ordered_json fast = nlohmann::ordered_json::object();
    for (const auto& [p, v] : r.fast_p) fast[fmt::format("{:g}", p)] = v;
    row["fast_p"] = fast;
    nlohmann::ordered_json pass = nlohmann::ordered_json::object(),
                           fast1 = nlohmann::ordered_json::object();
    for (const auto& [k, v] : r.pass_at_k) pass[std::to_string(k)] = v;
    for (const auto& [k, v] : r.fast1_at_k) fast1[std::to_string(k)] = v;
    row["pass_at_k"] = pass;
    row["fast1_at_k"] = fast1;
    row["geomean_speedup_correct"] = OptJson(r.geomean_correct);
    row["geomean_speedup_all"] =
        r.evaluated() ? nlohmann::ordered_json(r.geomean_all) : nlohmann::ordered_json(nullptr);
    row["expert_problems"] = r.expert_problems;
    row["human_parity"] = OptJson(r.human_parity);
    nlohmann::ordered_json expert_fast = nlohmann::ordered_json::object();
    for (const auto& [p, v] : r.expert_fast_p) expert_fast[fmt::format("{:g}", p)] = v;
    row["expert_fast_p"] = expert_fast;
    row["geomean_vs_expert"] = OptJson(r.geomean_vs_expert);
    row["tokens"] = r.tokens;
    row["cost_usd"] = r.cost_usd;
    row["tokens_per_solved"] = OptJson(r.tokens_per_solved);
    row["usd_per_solved"] = OptJson(r.cost_per_solved);
    row["wall_s"] = r.wall_s;
    doc["rows"].push_back(std::move(row));
  }
  doc["not_evaluated"] = nlohmann::ordered_json::array();
  for (const auto* s : NotEvaluatedSamples(board)) {
    doc["not_evaluated"].push_back({{"run", s->run},
                                    {"model", s->model},
                                    {"strategy", s->strategy},
                                    {"task", s->task},
                                    {"sample", s->sample},
                                    {"reason", s->not_evaluated_reason}});
  }
  return doc.dump(2) + "\n";
}

std::string Render(const Leaderboard& board, LeaderboardFormat format) {
  switch (format) {
    case LeaderboardFormat::kMarkdown:
      return RenderMarkdown(board);
    case LeaderboardFormat::kJson:
      return RenderJson(board);
    case LeaderboardFormat::kCsv:
      return RenderCsv(board);
    case LeaderboardFormat::kHtml:
      return RenderHtmlPage(board);
  }
  return RenderMarkdown(board);
}

}  // namespace kforge::results
