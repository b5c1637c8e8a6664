// Leaderboard renderers: the same rows as Markdown, JSON, CSV or one
// self-contained HTML page (inline CSS and SVG; nothing fetched).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/results/metrics.h"
#include "kforge/results/samples.h"

namespace kforge::results {

enum class LeaderboardFormat { kMarkdown, kJson, kCsv, kHtml };
Result<LeaderboardFormat> ParseLeaderboardFormat(std::string_view name);

struct Leaderboard {
  std::vector<std::string> runs;  // names of the runs pooled
  MetricsOptions options;
  std::vector<GroupMetrics> rows;
  std::vector<SampleOutcome> samples;  // kept for the HTML charts
};

Leaderboard BuildLeaderboard(std::vector<SampleOutcome> samples, const MetricsOptions& options);

// The leaderboard's figures as cells, one model for every format so that no
// two can disagree: Markdown and HTML render the human cells (a row nothing
// evaluated reads "not evaluated" and "—", never 0% or 1.000x), CSV the plain
// ones (blank where there is no figure); JSON carries the same numbers.
struct LeaderboardTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;  // one per board.rows entry, in order
};
LeaderboardTable BuildLeaderboardTable(const Leaderboard& board, bool human);

std::string RenderMarkdown(const Leaderboard& board);
std::string RenderCsv(const Leaderboard& board);
// Schema "kforge.leaderboard/1": {schema, runs, group_by, emulated_policy, rows:[…]}.
std::string RenderJson(const Leaderboard& board);
// A whole HTML document for publishing.
std::string RenderHtmlPage(const Leaderboard& board);
// The table and charts alone, for embedding in the web UI's pages.
// `link_base`, when not empty, turns each row into a link to `link_base` + model.
std::string RenderHtmlBody(const Leaderboard& board, std::string_view link_base = "");

std::string Render(const Leaderboard& board, LeaderboardFormat format);

// Names every session left out because nothing evaluated it, with the reason
// (a Markdown list; empty when there is none).
std::string NotEvaluatedNote(const Leaderboard& board);

}  // namespace kforge::results
