// The leaderboard as HTML: a table plus three inline SVG charts.
#include <fmt/format.h>

#include <cmath>
#include <map>

#include "kforge/results/leaderboard.h"
#include "web/html.h"
#include "web/svg_chart.h"

namespace kforge::results {

namespace {

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
    if (!r.evaluated()) continue;  // no figures to plot (never a point at 0)
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
  // The cells Markdown prints (BuildLeaderboardTable), so that the page can
  // never show a figure another format does not: a row nothing evaluated
  // reads "not evaluated", never 0% or 1.000x.
  const LeaderboardTable t = BuildLeaderboardTable(board, /*human=*/true);
  const size_t dims = board.options.group_by.size();
  std::string h = "<div class=\"table-wrap\"><table class=\"leaderboard\"><thead><tr><th>#</th>";
  for (size_t c = 0; c < t.header.size(); ++c) {
    h += (c < dims ? "<th class=\"l\">" : "<th>") + HtmlEscape(t.header[c]) + "</th>";
  }
  h += "</tr></thead><tbody>";
  int rank = 0;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const GroupMetrics& r = board.rows[i];
    if (r.emulated) {
      h += "<tr class=\"emulated\"><td><span class=\"tag emulated\">emulated</span></td>";
    } else if (!r.evaluated()) {
      h += "<tr class=\"not-evaluated\"><td>—</td>";
    } else {
      h += fmt::format("<tr><td>{}</td>", ++rank);
    }
    for (size_t c = 0; c < t.rows[i].size(); ++c) {
      const std::string& cell = t.rows[i][c];
      if (c < dims && board.options.group_by[c] == "model" && !link_base.empty()) {
        h += fmt::format("<td class=\"l\"><a href=\"{}{}\">{}</a></td>", link_base,
                         HtmlEscape(cell), HtmlEscape(cell));
      } else {
        h += (c < dims ? "<td class=\"l\">" : "<td>") + HtmlEscape(cell) + "</td>";
      }
    }
    h += "</tr>";
  }
  h += "</tbody></table></div>";
  if (board.rows.empty()) h += "<p class=\"note\">No evaluated sessions yet.</p>";
  if (const std::string missing = NotEvaluatedNote(board); !missing.empty()) {
    // The same list as Markdown's, one item a session.
    h += "<div class=\"note not-evaluated\">";
    size_t at = 0;
    bool first = true;
    while (at < missing.size()) {
      const size_t nl = missing.find('\n', at);
      const std::string line =
          missing.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
      at = nl == std::string::npos ? missing.size() : nl + 1;
      if (line.empty()) continue;
      if (line.rfind("- ", 0) == 0) {
        h += (first ? "<ul>" : "") + std::string("<li>") + HtmlEscape(line.substr(2)) + "</li>";
        first = false;
      } else {
        h += "<p>" + HtmlEscape(line) + "</p>";
      }
    }
    if (!first) h += "</ul>";
    h += "</div>";
  }
  h += "<p class=\"note\">A problem is (task, world size, dtype). correct = fast_0; fast_p: share "
       "of problems with "
       "a correct sample faster than p× the NCCL baseline. geomean_correct is over correct, "
       "timed problems; "
       "geomean_all counts an incorrect problem as 1.0×. Sessions nothing evaluated (no GPU, the "
       "model never reached) are left out of every figure and named above. Rows tagged <span "
       "class=\"tag emulated\">emulated</span> "
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
