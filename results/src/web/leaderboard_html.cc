// The leaderboard as HTML: a table plus three inline SVG charts.
#include <fmt/format.h>

#include <cmath>
#include <map>

#include "kforge/results/html.h"
#include "kforge/results/leaderboard.h"
#include "kforge/results/svg_chart.h"

namespace kforge::results {

namespace {

std::string Pct(double v) { return std::isnan(v) ? "—" : fmt::format("{:.1f}%", v * 100); }

bool RowHas(const GroupMetrics& row, const SampleOutcome& s, const MetricsOptions& options) {
  if (s.emulated && options.emulated == EmulatedPolicy::kExclude) return false;
  if (row.emulated != (s.emulated && options.emulated == EmulatedPolicy::kSeparate)) return false;
  for (const auto& [dim, value] : row.key) {
    if (DimensionValue(s, dim) != value) return false;
  }
  return true;
}

std::string RowName(const GroupMetrics& r) { return r.label + (r.emulated ? " [emulated]" : ""); }

std::string Charts(const Leaderboard& board) {
  std::vector<ChartSeries> fast, speedups, cost;
  for (const auto& r : board.rows) {
    ChartSeries f{RowName(r), {}};
    for (const auto& [p, v] : r.fast_p) f.points.emplace_back(p, v);
    fast.push_back(std::move(f));
    // Best correct speedup per problem: the distribution behind geomean_correct.
    std::map<std::string, double> best;
    for (const auto& s : board.samples) {
      if (!s.correct || !s.speedup || !RowHas(r, s, board.options)) continue;
      double& b = best[s.task + "/" + std::to_string(s.world) + "/" + s.dtype];
      b = std::max(b, *s.speedup);
    }
    ChartSeries sp{RowName(r), {}};
    for (const auto& [problem, v] : best) sp.points.emplace_back(v, 0);
    speedups.push_back(std::move(sp));
    cost.push_back({RowName(r), {{static_cast<double>(r.solved), r.cost_usd}}});
  }
  return "<div class=\"charts\">" +
         LineChart("chart-fastp", "fast_p against p", "p (speedup threshold)", "fast_p", fast) +
         SpeedupStrips("chart-speedup", "Speedup distribution (best correct per problem)",
                       speedups) +
         ScatterChart("chart-cost", "Cost against problems solved", "problems solved", "dollars",
                      cost) +
         "</div>";
}

}  // namespace

std::string RenderHtmlBody(const Leaderboard& board, std::string_view link_base) {
  std::string h = "<table class=\"leaderboard\"><thead><tr><th>#</th>";
  for (const auto& dim : board.options.group_by)
    h += "<th class=\"l\">" + HtmlEscape(dim) + "</th>";
  h += "<th>problems</th><th>samples</th><th>correct</th>";
  for (double p : board.options.ps) {
    if (p != 0) h += fmt::format("<th>fast_{:g}</th>", p);
  }
  h += "<th>pass@k</th><th>geomean (correct)</th><th>geomean (all)</th><th>$ / solved</th>"
       "<th>tokens / solved</th></tr></thead><tbody>";
  int rank = 0;
  for (const auto& r : board.rows) {
    h += r.emulated ? "<tr class=\"emulated\"><td><span class=\"tag emulated\">emulated</span></td>"
                    : fmt::format("<tr><td>{}</td>", ++rank);
    for (const auto& [dim, value] : r.key) {
      if (dim == "model" && !link_base.empty()) {
        h += fmt::format("<td class=\"l\"><a href=\"{}{}\">{}</a></td>", link_base,
                         HtmlEscape(value), HtmlEscape(value));
      } else {
        h += "<td class=\"l\">" + HtmlEscape(value) + "</td>";
      }
    }
    h += fmt::format("<td>{}</td><td>{}</td><td>{}</td>", r.problems, r.samples,
                     Pct(r.correct_rate));
    for (double p : board.options.ps) {
      if (p != 0) h += "<td>" + Pct(r.FastP(p)) + "</td>";
    }
    std::string pass;
    for (const auto& [k, v] : r.pass_at_k) pass += fmt::format("{}@{}: {} ", "pass", k, Pct(v));
    h += "<td>" + (pass.empty() ? "—" : HtmlEscape(pass)) + "</td>";
    h += "<td>" + (r.geomean_correct ? fmt::format("{:.3f}x", *r.geomean_correct) : "—") + "</td>";
    h += fmt::format("<td>{:.3f}x</td>", r.geomean_all);
    h += "<td>" + (r.cost_per_solved ? fmt::format("${:.3f}", *r.cost_per_solved) : "—") + "</td>";
    h += "<td>" + (r.tokens_per_solved ? fmt::format("{:.0f}", *r.tokens_per_solved) : "—") +
         "</td></tr>";
  }
  h += "</tbody></table>";
  if (board.rows.empty()) h += "<p class=\"note\">No evaluated sessions yet.</p>";
  h += "<p class=\"note\">A problem is (task, world size, dtype). correct = fast_0; fast_p: share "
       "of problems with "
       "a correct sample faster than p× the NCCL baseline. geomean (correct) is over correct, "
       "timed problems; "
       "geomean (all) counts an incorrect problem as 1.0×. Rows tagged <span class=\"tag "
       "emulated\">emulated</span> "
       "ran with ranks sharing a GPU: their timings are not NVLink timings and are ranked "
       "apart.</p>";
  h += Charts(board);
  return h;
}

std::string RenderHtmlPage(const Leaderboard& board) {
  std::string body = "<h1>kforge leaderboard</h1><p class=\"note\">Runs: ";
  for (size_t i = 0; i < board.runs.size(); ++i)
    body += (i ? ", " : "") + HtmlEscape(board.runs[i]);
  body += "</p>" + RenderHtmlBody(board);
  return HtmlDocument("kforge leaderboard", body);
}

}  // namespace kforge::results
