// What a run did: the live counts the progress view shows (Stats), the
// summary of every session at the end, and its text and JSON forms.
#include <fmt/format.h>

#include "kforge/agent/runner.h"
#include "kforge/results/samples.h"
#include "run_engine.h"

namespace kforge::agent {
namespace internal {
namespace {

// Mirrors results::NotEvaluated over the session's finished candidates. A
// session a budget or the deadline stopped counts only an evaluation's
// verdict: a reply without a kernel alone does not make it a wrong answer.
bool SessionNotEvaluated(const Session& s) {
  const bool limit = results::StoppedByLimit(s.stop_reason());
  bool verdict = false, compiled = false, gpu = false;
  for (const auto& c : s.candidates()) {
    if (c.phase != Phase::kFinished) continue;
    if (IsCorrect(c.outcome)) return false;
    switch (c.outcome) {
      case Outcome::kCompiled:
        compiled = true;
        break;
      case Outcome::kHarnessError:
        break;
      case Outcome::kNoKernel:
        verdict = verdict || !limit;
        break;
      case Outcome::kRuntimeError:
      case Outcome::kHang:
      case Outcome::kMismatch:
        gpu = true;
        verdict = true;
        break;
      default:
        verdict = true;
    }
  }
  return !verdict || (compiled && !gpu);
}

bool StoppedByError(const std::string& reason) {
  return reason.rfind("provider: ", 0) == 0 || reason.rfind("harness: ", 0) == 0;
}

}  // namespace

RunStats RunEngine::Stats() const {
  RunStats st;
  st.compile_only = spec_.compile_only;
  for (const auto& model : spec_.models) st.models[model];
  for (const auto& slot : sessions_) {
    const Session& s = *slot.session;
    ModelStats& m = st.models[s.spec().model];
    ++m.sessions;
    m.ended += s.Ended();
    if (auto b = s.BestCorrect()) {
      ++m.correct;
      m.faster += s.candidate(*b).speedup > 1.0;
    }
    bool compiled = false;
    for (const auto& c : s.candidates()) {
      compiled = compiled || (c.phase == Phase::kFinished && c.outcome == Outcome::kCompiled);
      m.turns += c.turn_id != 0;
    }
    m.compiled += compiled;
    m.not_evaluated += s.Ended() && SessionNotEvaluated(s);
  }
  for (auto& [model, m] : st.models) {
    BudgetBook::Spend sp = budget_.model(model);
    m.usd = sp.usd;
    m.tokens = sp.tokens;
    m.unpriced = unpriced_models_.count(model) > 0;
  }
  for (const auto& [id, job] : jobs_) {
    if (!dispatched_.count(id)) continue;
    const Session& s = *sessions_[job->session].session;
    const char* what = job->pool == Pool::kLlm       ? "model  "
                       : job->pool == Pool::kCompile ? "compile"
                                                     : "GPU    ";
    st.running.push_back(
        fmt::format("{} {} {} turn {}", what, s.spec().model, s.spec().task, job->candidate + 1));
  }
  st.queued_llm = static_cast<int>(scheduler_.queued(Pool::kLlm));
  st.queued_compile = static_cast<int>(scheduler_.queued(Pool::kCompile));
  st.queued_gpu = static_cast<int>(scheduler_.queued(Pool::kGpu));
  st.elapsed_s = std::chrono::duration<double>(deps_.clock->Now() - started_).count();
  st.gpu_busy_s = scheduler_.GpuBusySeconds();
  return st;
}

RunSummary RunEngine::Summarize() const {
  RunSummary sum;
  sum.run_id = run_id_;
  sum.name = spec_.name;
  sum.stats = Stats();
  sum.compile_only = spec_.compile_only;
  sum.wall_s = sum.stats.elapsed_s;
  double busy = 0;
  for (double b : sum.stats.gpu_busy_s) busy += b;
  if (sum.wall_s > 0 && !sum.stats.gpu_busy_s.empty()) {
    sum.gpu_busy_fraction = busy / (sum.wall_s * static_cast<double>(sum.stats.gpu_busy_s.size()));
  }
  for (const auto& slot : sessions_) {
    const Session& s = *slot.session;
    SessionSummary row{s.spec().model, s.spec().task, s.spec().sample,
                       slot.stored_state == "done" ? "done" : s.EndState(), s.stop_reason()};
    if (auto b = s.BestAny()) {
      row.best_outcome = std::string(OutcomeName(s.candidate(*b).outcome));
      row.best_speedup = s.candidate(*b).speedup;
    }
    for (const auto& c : s.candidates()) row.turns += c.turn_id != 0;
    row.not_evaluated = SessionNotEvaluated(s);
    row.failed = row.state == "stopped" && row.not_evaluated && StoppedByError(row.stop_reason);
    sum.sessions.push_back(row);
  }
  return sum;
}

}  // namespace internal

bool RunSummary::AllFailed() const {
  if (sessions.empty()) return false;
  for (const auto& r : sessions) {
    if (!r.failed) return false;
  }
  return true;
}

std::string RenderRunSummary(const RunSummary& s) {
  std::string out = "\n" + RenderStatsTable(s.stats) + "\n";
  out += fmt::format("{:<40} {:<16} {:<8} {:<14} {:>8} {:>6}  {}\n", "model", "task", "state",
                     "best", "speedup", "turns", "stop reason");
  int not_evaluated = 0;
  for (const auto& r : s.sessions) {
    not_evaluated += r.not_evaluated;
    out += fmt::format("{:<40} {:<16} {:<8} {:<14} {:>8} {:>6}  {}\n", r.model, r.task, r.state,
                       r.not_evaluated          ? "not evaluated"
                       : r.best_outcome.empty() ? "-"
                                                : r.best_outcome,
                       r.best_speedup > 0 ? fmt::format("{:.2f}x", r.best_speedup) : "-", r.turns,
                       r.stop_reason);
  }
  out += fmt::format("\nwall {:.1f} s", s.wall_s);
  if (!s.compile_only && !s.stats.gpu_busy_s.empty())
    out += fmt::format(", GPU busy {:.0f}% of wall time", 100 * s.gpu_busy_fraction);
  out += "\n";
  if (not_evaluated > 0) {
    out += fmt::format(
        "{} of {} session(s) NOT EVALUATED (left out of correctness and speed figures):\n",
        not_evaluated, s.sessions.size());
    for (const auto& r : s.sessions) {
      if (r.not_evaluated)
        out += fmt::format("  {} {} (sample {}): {}\n", r.model, r.task, r.sample,
                           r.stop_reason.empty() ? "nothing judged" : r.stop_reason);
    }
  }
  if (s.compile_only) {
    out += fmt::format(
        "NOTE: no GPU was used. Kernels were compiled and policy-checked only; correctness and "
        "speed were NOT measured. Evaluation needs a GPU: resume this run on a GPU machine "
        "(kforge run --resume {}).\n",
        s.name.empty() ? "NAME" : s.name);
  }
  if (s.AllFailed()) out += "FAILED: every session stopped on an error; nothing was measured.\n";
  return out;
}

nlohmann::json RunSummaryJson(const RunSummary& s) {
  nlohmann::json models = nlohmann::json::object();
  for (const auto& [model, m] : s.stats.models) {
    models[model] = {{"sessions", m.sessions},
                     {"ended", m.ended},
                     {"not_evaluated", m.not_evaluated},
                     {"correct", m.correct},
                     {"faster", m.faster},
                     {"compiled", m.compiled},
                     {"turns", m.turns},
                     {"tokens", m.tokens},
                     // null: some call had no price, so the spend is unknown
                     {"usd", m.unpriced ? nlohmann::json(nullptr) : nlohmann::json(m.usd)}};
  }
  nlohmann::json sessions = nlohmann::json::array();
  for (const auto& r : s.sessions) {
    sessions.push_back({{"model", r.model},
                        {"task", r.task},
                        {"sample", r.sample},
                        {"state", r.state},
                        {"stop_reason", r.stop_reason},
                        {"best_outcome", r.best_outcome.empty() ? nlohmann::json(nullptr)
                                                                : nlohmann::json(r.best_outcome)},
                        {"best_speedup", r.best_speedup > 0 ? nlohmann::json(r.best_speedup)
                                                            : nlohmann::json(nullptr)},
                        {"turns", r.turns},
                        {"not_evaluated", r.not_evaluated},
                        {"failed", r.failed}});
  }
  return {{"schema", "kforge.run_summary/1"},
          {"name", s.name},
          {"run_id", s.run_id},
          {"wall_s", s.wall_s},
          {"gpu_busy_fraction",
           s.compile_only ? nlohmann::json(nullptr) : nlohmann::json(s.gpu_busy_fraction)},
          {"compile_only", s.compile_only},
          {"aborted", s.aborted},
          {"all_failed", s.AllFailed()},
          {"models", models},
          {"sessions", sessions}};
}

}  // namespace kforge::agent
