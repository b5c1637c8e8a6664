#include "kforge/results/redteam_board.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "web/html.h"

namespace kforge::results {

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

void Add(RedTeamRow& into, const RedTeamRow& one) {
  into.sessions += one.sessions;
  into.attempts += one.attempts;
  into.kernels += one.kernels;
  into.passed += one.passed;
  into.breaches += one.breaches;
  into.reasons += one.reasons;
}

// One red-team run's sessions as rows (one per session) and its breaches.
Status LoadRun(const RunStore& store, const RunInfo& run, const std::vector<EventRecord>& events,
               std::vector<RedTeamRow>* rows, std::vector<RedTeamBreach>* found) {
  KF_ASSIGN_OR_RETURN(auto sessions, store.ListSessions(run.id));
  KF_ASSIGN_OR_RETURN(auto usage, store.ListSessionUsage(run.id));
  KF_ASSIGN_OR_RETURN(auto evals, store.ListRunEvaluations(run.id));
  const auto breaches = BreachesOf(events);
  const size_t first = found->size();
  for (const auto& s : sessions) {
    RedTeamRow row{s.key.model, s.key.task};
    row.sessions = 1;
    for (const auto& u : usage) {
      if (u.session_id != s.id) continue;
      row.attempts = u.turns;
      row.kernels = u.turns - u.no_kernel_turns;
    }
    std::set<int64_t> passed_turns;
    for (const auto& e : evals) {
      if (e.session_id == s.id && e.verdict == Verdict::kPassed) passed_turns.insert(e.turn_id);
    }
    row.passed = static_cast<int>(passed_turns.size());
    std::set<int> breached_turns;
    for (const auto& b : breaches) {
      if (b.session_id != s.id || !breached_turns.insert(b.turn).second) continue;
      row.reasons += static_cast<int>(b.reasons.size());
      found->push_back({run.name, s.key.model, s.key.task, s.key.strategy, s.id, s.key.sample, b});
    }
    row.breaches = static_cast<int>(breached_turns.size());
    rows->push_back(std::move(row));
  }
  // Events come in the order evaluations finished; the list reads by turn.
  std::stable_sort(found->begin() + static_cast<std::ptrdiff_t>(first), found->end(),
                   [](const RedTeamBreach& a, const RedTeamBreach& b) {
                     return std::tie(a.session_id, a.breach.turn) <
                            std::tie(b.session_id, b.breach.turn);
                   });
  return Status::Ok();
}

std::vector<std::string> Cells(const RedTeamRow& r, bool with_task) {
  std::vector<std::string> cells = {r.model};
  if (with_task) cells.push_back(r.task);
  for (int v : {r.sessions, r.attempts, r.kernels, r.passed, r.breaches, r.reasons})
    cells.push_back(std::to_string(v));
  return cells;
}

std::vector<std::string> Header(bool with_task) {
  std::vector<std::string> h = {"model"};
  if (with_task) h.push_back("task");
  h.insert(h.end(), {"sessions", "attempts", "kernels", "passed", "breaches", "reasons"});
  return h;
}

std::string BreachLine(const RedTeamBreach& f) {
  return fmt::format("{} / {} / {} (session {}, sample {}), turn {} ({})", f.run, f.model, f.task,
                     f.session_id, f.sample, f.breach.turn, f.breach.verdict);
}

std::string MarkdownTable(const std::vector<RedTeamRow>& rows, bool with_task) {
  const auto header = Header(with_task);
  std::string out = fmt::format("| {} |\n|", fmt::join(header, " | "));
  for (size_t i = 0; i < header.size(); ++i) out += i < (with_task ? 2u : 1u) ? "---|" : "---:|";
  out += "\n";
  for (const auto& r : rows) out += fmt::format("| {} |\n", fmt::join(Cells(r, with_task), " | "));
  return out;
}

constexpr const char* kNote =
    "attempts: the model's replies; kernels: those that held a kernel; passed: attempts an "
    "evaluation passed; breaches: attempts that look like a hole in the evaluator "
    "(docs/integrity.md, \"kforge red-teams kforge\"), a suspicion for an engineer, not a verdict; "
    "reasons: theirs, summed. `kforge show RUN --session S --export-breach TURN` writes one as an "
    "exploit kernel for tests/adversarial/kernels/.";

std::string RenderRedTeamMarkdown(const RedTeamBoard& board) {
  std::string out = fmt::format("# kforge red-team board\n\nRuns: {}\n\n## Per model\n\n",
                                fmt::join(board.runs, ", "));
  out += MarkdownTable(board.models, false);
  out += "\n## Per model and task\n\n" + MarkdownTable(board.rows, true);
  out += fmt::format("\n## Breaches ({})\n\n", board.found.size());
  if (board.found.empty()) out += "(none)\n";
  for (const auto& f : board.found) {
    out += "- " + BreachLine(f) + "\n";
    for (const auto& r : f.breach.reasons) out += "  - " + r + "\n";
  }
  return out + "\n" + kNote + "\n";
}

ordered_json RowJson(const RedTeamRow& r, bool with_task) {
  ordered_json row;
  row["model"] = r.model;
  if (with_task) row["task"] = r.task;
  row["sessions"] = r.sessions;
  row["attempts"] = r.attempts;
  row["kernels"] = r.kernels;
  row["passed"] = r.passed;
  row["breaches"] = r.breaches;
  row["reasons"] = r.reasons;
  return row;
}

std::string RenderRedTeamJson(const RedTeamBoard& board) {
  ordered_json doc;
  doc["schema"] = "kforge.redteam/1";
  doc["runs"] = board.runs;
  doc["models"] = ordered_json::array();
  for (const auto& r : board.models) doc["models"].push_back(RowJson(r, false));
  doc["rows"] = ordered_json::array();
  for (const auto& r : board.rows) doc["rows"].push_back(RowJson(r, true));
  doc["breaches"] = ordered_json::array();
  for (const auto& f : board.found) {
    doc["breaches"].push_back({{"run", f.run},
                               {"model", f.model},
                               {"task", f.task},
                               {"strategy", f.strategy},
                               {"session", f.session_id},
                               {"sample", f.sample},
                               {"turn", f.breach.turn},
                               {"verdict", f.breach.verdict},
                               {"reasons", f.breach.reasons}});
  }
  return doc.dump(2) + "\n";
}

std::string RenderRedTeamCsv(const RedTeamBoard& board) {
  std::string out = fmt::format("{}\n", fmt::join(Header(true), ","));
  for (const auto& r : board.rows) {
    auto cells = Cells(r, true);
    for (auto& c : cells) {
      if (c.find_first_of(",\"\n") == std::string::npos) continue;
      std::string quoted = "\"";
      for (char ch : c) quoted += ch == '"' ? std::string("\"\"") : std::string(1, ch);
      c = quoted + "\"";
    }
    out += fmt::format("{}\n", fmt::join(cells, ","));
  }
  return out;
}

std::string HtmlTable(const std::vector<RedTeamRow>& rows, bool with_task) {
  std::string out = "<table><thead><tr>";
  for (const auto& h : Header(with_task)) out += "<th>" + HtmlEscape(h) + "</th>";
  out += "</tr></thead><tbody>\n";
  for (const auto& r : rows) {
    out += "<tr>";
    for (const auto& c : Cells(r, with_task)) out += "<td>" + HtmlEscape(c) + "</td>";
    out += "</tr>\n";
  }
  return out + "</tbody></table>\n";
}

std::string RenderRedTeamHtml(const RedTeamBoard& board) {
  std::string body = "<h1>kforge red-team board</h1>\n<p>Runs: " +
                     HtmlEscape(fmt::format("{}", fmt::join(board.runs, ", "))) +
                     "</p>\n<h2>Per model</h2>\n" + HtmlTable(board.models, false) +
                     "<h2>Per model and task</h2>\n" + HtmlTable(board.rows, true) +
                     fmt::format("<h2>Breaches ({})</h2>\n<ul>\n", board.found.size());
  for (const auto& f : board.found) {
    body += "<li>" + HtmlEscape(BreachLine(f)) + "<ul>";
    for (const auto& r : f.breach.reasons) body += "<li>" + HtmlEscape(r) + "</li>";
    body += "</ul></li>\n";
  }
  body += "</ul>\n<p>" + HtmlEscape(kNote) + "</p>\n";
  return HtmlDocument("kforge red-team board", body);
}

}  // namespace

Result<RedTeamBoard> LoadRedTeamBoard(const std::vector<fs::path>& run_dirs) {
  RedTeamBoard board;
  std::vector<RedTeamRow> sessions;
  std::vector<std::string> read;
  for (const auto& dir : run_dirs) {
    read.push_back(dir.string());
    KF_ASSIGN_OR_RETURN(auto store, RunStore::Open(dir, true));
    KF_ASSIGN_OR_RETURN(auto runs, store->ListRuns());
    for (const auto& run : runs) {
      KF_ASSIGN_OR_RETURN(auto events, store->ListEvents(run.id));
      if (!IsRedTeamRun(dir, events)) continue;
      board.runs.push_back(run.name);
      KF_RETURN_IF_ERROR(LoadRun(*store, run, events, &sessions, &board.found));
    }
  }
  if (board.runs.empty())
    return Error(ErrorKind::kNotFound,
                 fmt::format("no red-team run among {} (`kforge run --strategy redteam` makes one)",
                             fmt::join(read, ", ")));
  std::map<std::pair<std::string, std::string>, RedTeamRow> per_task;
  std::map<std::string, RedTeamRow> per_model;
  for (const auto& s : sessions) {
    auto& t = per_task.try_emplace({s.model, s.task}, RedTeamRow{s.model, s.task}).first->second;
    Add(t, s);
    Add(per_model.try_emplace(s.model, RedTeamRow{s.model, ""}).first->second, s);
  }
  for (auto& [key, row] : per_task) board.rows.push_back(std::move(row));
  for (auto& [key, row] : per_model) board.models.push_back(std::move(row));
  return board;
}

std::string RenderRedTeam(const RedTeamBoard& board, LeaderboardFormat format) {
  switch (format) {
    case LeaderboardFormat::kMarkdown:
      return RenderRedTeamMarkdown(board);
    case LeaderboardFormat::kJson:
      return RenderRedTeamJson(board);
    case LeaderboardFormat::kCsv:
      return RenderRedTeamCsv(board);
    case LeaderboardFormat::kHtml:
      return RenderRedTeamHtml(board);
  }
  return RenderRedTeamMarkdown(board);
}

}  // namespace kforge::results
