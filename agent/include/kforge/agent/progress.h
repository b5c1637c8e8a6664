// Run progress: per-model counters and what runs now, drawn as a live view
// on a terminal and as plain log lines otherwise.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "kforge/core/clock.h"

namespace kforge::agent {

struct ModelStats {
  int sessions = 0;
  int ended = 0;
  int correct = 0;   // sessions with a correct kernel
  int faster = 0;    // sessions with a correct kernel faster than the baseline
  int compiled = 0;  // sessions whose kernel compiled but could not be evaluated (no GPU)
  int not_evaluated = 0;
  bool unpriced = false;  // some call had no price in the registry: spend is unknown, not $0
  int turns = 0;
  double usd = 0;
  int64_t tokens = 0;
};

struct RunStats {
  std::map<std::string, ModelStats> models;
  std::vector<std::string> running;  // "llm  model  task  turn 3", ...
  int queued_llm = 0, queued_compile = 0, queued_gpu = 0;
  double elapsed_s = 0;
  std::vector<double> gpu_busy_s;
  bool compile_only = false;
};

// The table both views print: one row per model, then totals.
std::string RenderStatsTable(const RunStats& stats);

// The live view's progress lines, one per model: "model  3/8 done  ETA 12m",
// the ETA from the rate at which that model's sessions ended so far ("ETA ?"
// until one has).
std::string RenderProgressLines(const RunStats& stats);

// Whether to redraw in place: only on a terminal that understands cursor
// movement (TERM set and not "dumb"); otherwise plain lines, no escape codes.
bool WantsLiveView(bool is_tty, const char* term);

class ProgressView {
 public:
  // `live`: redraw in place (a terminal); otherwise one plain line per event.
  ProgressView(std::FILE* out, bool live, const Clock& clock);
  // A notable event: a turn's outcome, a session's end, a budget stop.
  void Event(const std::string& line);
  // Redraws the live view (at most once a second unless `force`).
  void Update(const RunStats& stats, bool force = false);
  void Finish();

 private:
  void Draw(const RunStats& stats);

  std::FILE* out_;
  bool live_;
  const Clock& clock_;
  Clock::TimePoint last_draw_{};
  int drawn_lines_ = 0;
  std::vector<std::string> recent_;
  bool drawn_once_ = false;
};

}  // namespace kforge::agent
