#include "kforge/agent/progress.h"

#include <fmt/format.h>

#include <chrono>
#include <string_view>

#include "kforge/core/log.h"

namespace kforge::agent {
namespace {
constexpr size_t kRecentEvents = 6;
constexpr size_t kRunningShown = 8;
}  // namespace

std::string RenderStatsTable(const RunStats& s) {
  std::string out = fmt::format(
      "{:<40} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>10} {:>10}\n", "model", "tasks", "ended",
      "not eval", s.compile_only ? "compiled" : "correct", "faster", "turns", "tokens", "spend");
  ModelStats total;
  for (const auto& [model, m] : s.models) {
    out += fmt::format("{:<40} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>10} {:>10}\n", model,
                       m.sessions, m.ended, m.not_evaluated,
                       s.compile_only ? m.compiled : m.correct, m.faster, m.turns, m.tokens,
                       m.unpriced ? std::string("unpriced") : fmt::format("${:.4f}", m.usd));
    total.unpriced = total.unpriced || m.unpriced;
    total.sessions += m.sessions;
    total.ended += m.ended;
    total.not_evaluated += m.not_evaluated;
    total.correct += m.correct;
    total.compiled += m.compiled;
    total.faster += m.faster;
    total.turns += m.turns;
    total.tokens += m.tokens;
    total.usd += m.usd;
  }
  if (s.models.size() > 1) {
    out += fmt::format("{:<40} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>10} {:>10}\n", "all",
                       total.sessions, total.ended, total.not_evaluated,
                       s.compile_only ? total.compiled : total.correct, total.faster, total.turns,
                       total.tokens,
                       total.unpriced ? fmt::format("${:.4f}+unpriced", total.usd)
                                      : fmt::format("${:.4f}", total.usd));
  }
  return out;
}

std::string RenderProgressLines(const RunStats& s) {
  std::string out;
  for (const auto& [model, m] : s.models) {
    std::string eta = "ETA ?";
    if (m.ended >= m.sessions) {
      eta = "finished";
    } else if (m.ended > 0 && s.elapsed_s > 0) {
      const double left = s.elapsed_s / m.ended * (m.sessions - m.ended);
      eta = left < 90     ? fmt::format("ETA {:.0f}s", left)
            : left < 5400 ? fmt::format("ETA {:.0f}m", left / 60)
                          : fmt::format("ETA {:.1f}h", left / 3600);
    }
    out += fmt::format("  {:<40} {:>4}/{:<4} done  {}\n", model, m.ended, m.sessions, eta);
  }
  return out;
}

bool WantsLiveView(bool is_tty, const char* term) {
  if (!is_tty || term == nullptr) return false;
  const std::string_view t(term);
  return !t.empty() && t != "dumb";
}

ProgressView::ProgressView(std::FILE* out, bool live, const Clock& clock)
    : out_(out), live_(live), clock_(clock) {}

void ProgressView::Event(const std::string& line) {
  if (!live_) {
    LogInfo("run", "{}", line);
    return;
  }
  recent_.push_back(line);
  if (recent_.size() > kRecentEvents) recent_.erase(recent_.begin());
}

void ProgressView::Update(const RunStats& stats, bool force) {
  if (!live_) return;
  auto now = clock_.Now();
  if (!force && drawn_once_ && now - last_draw_ < std::chrono::seconds(1)) return;
  last_draw_ = now;
  drawn_once_ = true;
  Draw(stats);
}

void ProgressView::Draw(const RunStats& s) {
  std::string text = RenderStatsTable(s);
  double busy = 0;
  for (double b : s.gpu_busy_s) busy += b;
  double gpu_pct = (s.elapsed_s > 0 && !s.gpu_busy_s.empty())
                       ? 100.0 * busy / (s.elapsed_s * static_cast<double>(s.gpu_busy_s.size()))
                       : 0.0;
  text += fmt::format(
      "elapsed {:.0f} s | queued: {} model calls, {} compiles, {} GPU evaluations | GPU busy "
      "{:.0f}%\n",
      s.elapsed_s, s.queued_llm, s.queued_compile, s.queued_gpu, gpu_pct);
  text += RenderProgressLines(s);
  for (size_t i = 0; i < s.running.size() && i < kRunningShown; ++i)
    text += "  now: " + s.running[i] + "\n";
  if (s.running.size() > kRunningShown)
    text += fmt::format("  ... and {} more\n", s.running.size() - kRunningShown);
  for (const auto& e : recent_) text += "  " + e + "\n";
  // Move up over the previous drawing and clear it.
  std::string erase;
  for (int i = 0; i < drawn_lines_; ++i) erase += "\x1b[1A\x1b[2K";
  std::fputs((erase + text).c_str(), out_);
  std::fflush(out_);
  drawn_lines_ = 0;
  for (char c : text) drawn_lines_ += c == '\n';
}

void ProgressView::Finish() {
  if (live_ && drawn_lines_ > 0) {
    std::string erase;
    for (int i = 0; i < drawn_lines_; ++i) erase += "\x1b[1A\x1b[2K";
    std::fputs(erase.c_str(), out_);
    drawn_lines_ = 0;
  }
}

}  // namespace kforge::agent
