#include "kforge/results/breach_export.h"

#include <fmt/format.h>

#include <system_error>

#include "kforge/core/fs.h"
#include "kforge/results/breaches.h"

namespace kforge::results {

namespace {

namespace fs = std::filesystem;

constexpr size_t kHeaderWidth = 80;

// Free text made safe for a `//` line: no control characters (a newline would
// end the comment), no backslash (one ending a line would splice the next
// into the comment) and no second `Expected:` for the suite's header parser
// to read before the real one.
std::string CommentSafe(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    if (c == '\\') c = '/';
  }
  for (size_t at = text.find("Expected:"); at != std::string::npos; at = text.find("Expected:", at))
    text.replace(at, 9, "Expected -");
  return text;
}

// `text` as `//` lines of at most kHeaderWidth columns (a longer word keeps
// its own line).
std::string CommentLines(const std::string& text) {
  std::string out, line = "//";
  size_t at = 0;
  while (at < text.size()) {
    while (at < text.size() && text[at] == ' ') ++at;
    if (at >= text.size()) break;
    size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(at, end - at);
    if (line.size() > 2 && line.size() + 1 + word.size() > kHeaderWidth) {
      out += line + "\n";
      line = "//";
    }
    line += " " + word;
    at = end;
  }
  return out + line + "\n";
}

// A task key as part of a file name: letters, digits, '-' and '_' only.
std::string FileNamePart(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    out += ok ? c : '_';
  }
  return out.empty() ? "task" : out;
}

std::string Header(const BreachExport& e, const std::string& found_as) {
  std::string reasons;
  for (size_t i = 0; i < e.reasons.size(); ++i)
    reasons += (i ? "; " : "") + CommentSafe(e.reasons[i]);
  std::string out = CommentLines(
      "Exploit: found by a red-team run (docs/integrity.md, \"kforge red-teams kforge\") and not "
      "yet explained: the fixer says here what it does. The breach: " +
      reasons + ".");
  out += CommentLines(CommentSafe(fmt::format(
      "From: run {}, session {}, turn {}, task {}, model {}, strategy {}, sample {}, world {}, {}; "
      "kernel sha256 {} (kforge show RUN --session {} --export-breach {}).",
      e.run, e.session_id, e.turn, e.task, e.model, e.strategy, e.sample, e.world, e.dtype,
      e.kernel_sha, e.session_id, e.turn)));
  out += CommentLines(CommentSafe("Found as: " + found_as + "."));
  out += CommentLines(fmt::format(
      "Expected: {} (found as {}): the fixer replaces {} with the verdict the fixed evaluator "
      "must give and why, as the other kernels here state it; until then the header check fails.",
      kExpectedPlaceholder, CommentSafe(e.verdict), kExpectedPlaceholder));
  return out;
}

std::string ListBreaches(const std::vector<std::pair<BreachRecord, SessionRecord>>& found) {
  std::string out;
  for (const auto& [b, s] : found) {
    out += fmt::format("{}turn {} of session {} ({}, {}, sample {})", out.empty() ? "" : "; ",
                       b.turn, s.id, s.key.task, s.key.model, s.key.sample);
  }
  return out;
}

}  // namespace

Result<BreachExport> PrepareBreachExport(const RunStore& store, const ShowOptions& select,
                                         int turn) {
  if (turn < 1)
    return Error(
        ErrorKind::kInvalidInput,
        fmt::format("--export-breach {}: a turn counts from 1, as `kforge show` prints it", turn));
  std::vector<std::pair<BreachRecord, SessionRecord>> all, selected, at_turn;
  std::vector<RunInfo> run_of;
  KF_ASSIGN_OR_RETURN(auto runs, store.ListRuns());
  for (const auto& run : runs) {
    KF_ASSIGN_OR_RETURN(auto events, store.ListEvents(run.id));
    for (const auto& b : BreachesOf(events)) {
      KF_ASSIGN_OR_RETURN(SessionRecord s, store.GetSession(b.session_id));
      all.emplace_back(b, s);
      if (!ShowSelects(s, select)) continue;
      selected.emplace_back(b, s);
      if (b.turn != turn) continue;
      // One session's turn may be reported once per evaluation; it is one attempt.
      bool seen = false;
      for (const auto& [ob, os] : at_turn) seen = seen || os.id == s.id;
      if (!seen) {
        at_turn.emplace_back(b, s);
        run_of.push_back(run);
      }
    }
  }
  const std::string where = store.dir().string();
  if (all.empty())
    return Error(ErrorKind::kNotFound,
                 fmt::format("{} recorded no red-team breach (a run made with --strategy redteam "
                             "records one where an attempt looks like a hole in the evaluator)",
                             where));
  if (selected.empty())
    return Error(ErrorKind::kNotFound,
                 fmt::format("no red-team breach in the sessions selected in {} (its breaches: {})",
                             where, ListBreaches(all)));
  if (at_turn.empty())
    return Error(ErrorKind::kNotFound, fmt::format("no red-team breach at turn {} in {} (its "
                                                   "breaches: {})",
                                                   turn, where, ListBreaches(selected)));
  if (at_turn.size() > 1)
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("turn {} breached in {} sessions of {} ({}); pick one with --session "
                             "ID (or TASK, --model, --sample)",
                             turn, at_turn.size(), where, ListBreaches(at_turn)));
  const auto& [breach, session] = at_turn.front();
  BreachExport e;
  e.run = run_of.front().name;
  e.model = session.key.model;
  e.task = session.key.task;
  e.strategy = session.key.strategy;
  e.dtype = session.key.dtype;
  e.sample = session.key.sample;
  e.world = session.key.world;
  e.session_id = session.id;
  e.turn = turn;
  e.verdict = breach.verdict;
  e.reasons = breach.reasons;
  KF_ASSIGN_OR_RETURN(auto turns, store.ListTurns(session.id));
  const TurnRecord* t = nullptr;
  for (const auto& candidate : turns) {
    if (candidate.index == turn - 1) t = &candidate;
  }
  if (t == nullptr)
    return Error(ErrorKind::kNotFound, fmt::format("session {} of {} holds no turn {} (its breach "
                                                   "was recorded, the turn was not)",
                                                   session.id, where, turn));
  if (t->kernel_sha.empty())
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("the breach at turn {} of session {} ({}) is in a reply that held no "
                             "kernel: nothing to export (`kforge show {} --session {}` prints the "
                             "reply)",
                             turn, session.id, fmt::join(e.reasons, "; "), where, session.id));
  e.kernel = t->kernel;
  e.kernel_sha = t->kernel_sha;
  std::string found_as = e.verdict;
  KF_ASSIGN_OR_RETURN(auto evals, store.ListEvaluations(session.id));
  for (const auto& ev : evals) {
    if (ev.turn_id != t->id || !ev.speedup) continue;
    found_as = fmt::format("{} at {:.3f}x the reference", e.verdict, *ev.speedup);
    if (ev.expert_speedup) found_as += fmt::format(", {:.3f}x the expert", *ev.expert_speedup);
  }
  e.file_name = fmt::format("redteam_{}_s{}_t{}.cu", FileNamePart(e.task), e.session_id, e.turn);
  e.content = Header(e, found_as) + "\n" + e.kernel;
  return e;
}

Result<fs::path> WriteBreachExport(const BreachExport& e, const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Error(ErrorKind::kNotFound,
                 fmt::format("--to {}: no such directory (the default, "
                             "tests/adversarial/kernels, is relative to the working directory: "
                             "run from the source root)",
                             dir.string()));
  const fs::path path = dir / e.file_name;
  Status s = WriteNewPublishedFile(path, e.content);
  if (!s.ok() && s.kind() == ErrorKind::kInvalidInput)
    return Error(
        ErrorKind::kInvalidInput,
        fmt::format("{} exists; not overwritten (remove it, or export elsewhere with --to)",
                    path.string()));
  KF_RETURN_IF_ERROR(s);
  return path;
}

nlohmann::json BreachExportJson(const BreachExport& e, const fs::path& path) {
  return {{"schema", "kforge.breach_export/1"},
          {"path", path.string()},
          {"run", e.run},
          {"session", e.session_id},
          {"turn", e.turn},
          {"task", e.task},
          {"model", e.model},
          {"strategy", e.strategy},
          {"sample", e.sample},
          {"world", e.world},
          {"dtype", e.dtype},
          {"verdict", e.verdict},
          {"reasons", e.reasons},
          {"kernel_sha256", e.kernel_sha}};
}

}  // namespace kforge::results
