#include "kforge/results/show.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "kforge/results/breaches.h"
#include "report/line_diff.h"

namespace kforge::results {

namespace {

std::string Indented(const std::string& text, bool full, int max_lines) {
  std::string out;
  int lines = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (!full && lines == max_lines) {
      const std::string_view rest_text = std::string_view(text).substr(start);
      const auto rest =
          std::count(rest_text.begin(), rest_text.end(), '\n') + (text.back() != '\n' ? 1 : 0);
      out += fmt::format("    … {} more lines (--full shows all)\n", rest);
      break;
    }
    out += "    " + text.substr(start, end - start) + "\n";
    ++lines;
    start = end + 1;
  }
  return out.empty() ? "    (empty)\n" : out;
}

Status NoMatch(const RunStore& store, const ShowOptions& o) {
  std::string asked;
  if (!o.task.empty()) asked += " task " + o.task;
  if (!o.model.empty()) asked += " model " + o.model;
  if (!o.strategy.empty()) asked += " strategy " + o.strategy;
  if (o.sample >= 0) asked += fmt::format(" sample {}", o.sample);
  if (o.session >= 0) asked += fmt::format(" session {}", o.session);
  return Error(ErrorKind::kNotFound, "no session matches" + asked + " in " + store.dir().string());
}

nlohmann::json OrNull(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// A red-team run's breaches of one session (kforge/results/breaches.h),
// [{turn (from 1), verdict, reasons[]}].
nlohmann::json SessionBreaches(const std::vector<EventRecord>& events, int64_t session_id) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& b : BreachesOf(events)) {
    if (b.session_id != session_id) continue;
    out.push_back({{"turn", b.turn}, {"verdict", b.verdict}, {"reasons", b.reasons}});
  }
  return out;
}

}  // namespace

bool ShowSelects(const SessionRecord& s, const ShowOptions& o) {
  return (o.task.empty() || s.key.task == o.task) && (o.model.empty() || s.key.model == o.model) &&
         (o.strategy.empty() || s.key.strategy == o.strategy) &&
         (o.sample < 0 || s.key.sample == o.sample) && (o.session < 0 || s.id == o.session);
}

Result<nlohmann::json> RenderShowJson(const RunStore& store, const ShowOptions& o) {
  using nlohmann::json;
  json sessions = json::array();
  KF_ASSIGN_OR_RETURN(auto runs, store.ListRuns());
  for (const auto& run : runs) {
    KF_ASSIGN_OR_RETURN(auto list, store.ListSessions(run.id));
    KF_ASSIGN_OR_RETURN(auto events, store.ListEvents(run.id));
    for (const auto& s : list) {
      if (!ShowSelects(s, o)) continue;
      KF_ASSIGN_OR_RETURN(auto turns, store.ListTurns(s.id));
      KF_ASSIGN_OR_RETURN(auto evals, store.ListEvaluations(s.id));
      json jturns = json::array();
      for (const auto& t : turns) {
        json jevals = json::array();
        for (const auto& e : evals) {
          if (e.turn_id != t.id) continue;
          jevals.push_back({{"id", e.id},
                            {"status", VerdictName(e.verdict)},
                            {"speedup", OrNull(e.speedup)},
                            {"expert_speedup", OrNull(e.expert_speedup)},
                            {"busbw_gbps", OrNull(e.busbw_gbps)},
                            {"emulated", e.emulated},
                            {"seconds", e.seconds},
                            {"world", e.world},
                            {"message", e.message},
                            {"best", s.best_evaluation_id && *s.best_evaluation_id == e.id}});
        }
        jturns.push_back(
            {{"turn", t.index + 1},
             {"input_tokens", t.usage.input_tokens},
             {"cached_input_tokens", t.usage.cached_input_tokens},
             {"output_tokens", t.usage.output_tokens},
             {"reasoning_tokens", t.usage.reasoning_tokens},
             {"cost_usd", t.usage.cost_usd},
             {"latency_s", t.latency_s},
             {"finish_reason", t.finish_reason},
             {"request_id", t.request_id},
             {"prompt", t.prompt},
             {"reply", t.reply},
             {"kernel_sha256", t.kernel_sha.empty() ? json(nullptr) : json(t.kernel_sha)},
             {"kernel", t.kernel_sha.empty() ? json(nullptr) : json(t.kernel)},
             {"feedback", t.feedback},
             {"evaluations", jevals}});
      }
      sessions.push_back(
          {{"run", run.name},
           {"session", s.id},
           {"model", s.key.model},
           {"task", s.key.task},
           {"strategy", s.key.strategy},
           {"sample", s.key.sample},
           {"world", s.key.world},
           {"dtype", s.key.dtype},
           {"category", s.key.category},
           {"state", s.state},
           {"stop_reason", s.stop_reason},
           {"turns_done", s.turns_done},
           {"best_evaluation", s.best_evaluation_id ? json(*s.best_evaluation_id) : json(nullptr)},
           {"breaches", SessionBreaches(events, s.id)},
           {"turns", jturns}});
    }
  }
  if (sessions.empty()) return NoMatch(store, o);
  return json{{"schema", "kforge.show/1"}, {"store", store.dir().string()}, {"sessions", sessions}};
}

Result<std::string> RenderShowText(const RunStore& store, const ShowOptions& o) {
  std::string out;
  int shown = 0;
  KF_ASSIGN_OR_RETURN(auto runs, store.ListRuns());
  for (const auto& run : runs) {
    KF_ASSIGN_OR_RETURN(auto sessions, store.ListSessions(run.id));
    KF_ASSIGN_OR_RETURN(auto events, store.ListEvents(run.id));
    for (const auto& s : sessions) {
      if (!ShowSelects(s, o)) continue;
      ++shown;
      out += fmt::format("=== run {} · session {} · {} · {} · {} · sample {} · world {} · {} ===\n",
                         run.name, s.id, s.key.model, s.key.task, s.key.strategy, s.key.sample,
                         s.key.world, s.key.dtype);
      out += fmt::format("state: {}{}; turns: {}\n", s.state,
                         s.stop_reason.empty() ? "" : " (" + s.stop_reason + ")", s.turns_done);
      for (const auto& b : SessionBreaches(events, s.id)) {
        for (const auto& reason : b["reasons"]) {
          out += fmt::format("RED-TEAM BREACH: turn {} ({}): {}\n", b["turn"].get<int>(),
                             b["verdict"].get<std::string>(),
                             reason.is_string() ? reason.get<std::string>() : reason.dump());
        }
      }
      KF_ASSIGN_OR_RETURN(auto turns, store.ListTurns(s.id));
      KF_ASSIGN_OR_RETURN(auto evals, store.ListEvaluations(s.id));
      std::string previous_kernel;
      bool have_previous = false;
      for (const auto& t : turns) {
        out += fmt::format("\n--- turn {} · {} in / {} out tokens · ${:.4f} · {:.1f} s{} ---\n",
                           t.index + 1,  // from 1, as the feedback counts
                           t.usage.input_tokens, t.usage.output_tokens, t.usage.cost_usd,
                           t.latency_s, t.finish_reason.empty() ? "" : " · " + t.finish_reason);
        out += "  prompt:\n" + Indented(t.prompt, o.full, o.max_lines);
        out += "  reply:\n" + Indented(t.reply, o.full, o.max_lines);
        if (!t.kernel_sha.empty()) {
          const std::string& kernel = t.kernel;
          if (!have_previous) {
            out += fmt::format("  kernel {}:\n", t.kernel_sha.substr(0, 12)) +
                   Indented(kernel, o.full, o.max_lines);
          } else if (kernel == previous_kernel) {
            out += fmt::format("  kernel {}: unchanged from the previous turn\n",
                               t.kernel_sha.substr(0, 12));
          } else {
            out += fmt::format("  kernel {} (diff to the previous kernel):\n",
                               t.kernel_sha.substr(0, 12)) +
                   Indented(UnifiedDiff(DiffLines(previous_kernel, kernel)), true, 0);
          }
          previous_kernel = kernel;
          have_previous = true;
        } else {
          out += "  kernel: none extracted\n";
        }
        for (const auto& e : evals) {
          if (e.turn_id != t.id) continue;
          const bool best = s.best_evaluation_id && *s.best_evaluation_id == e.id;
          out += fmt::format(
              "  evaluation {}: {}{}{}{}{}\n", e.id, VerdictName(e.verdict),
              e.speedup ? fmt::format(" · {:.3f}x", *e.speedup) : "",
              e.expert_speedup ? fmt::format(" · {:.3f}x the expert", *e.expert_speedup) : "",
              e.emulated ? " · EMULATED (ranks shared a GPU)" : "", best ? " · best" : "");
          if (!e.message.empty()) out += "    " + e.message + "\n";
        }
        if (!t.feedback.empty()) out += "  feedback:\n" + Indented(t.feedback, o.full, o.max_lines);
      }
      out += "\n";
    }
  }
  if (shown == 0) return NoMatch(store, o);
  return out;
}

}  // namespace kforge::results
