// `kforge leaderboard --redteam`: what red-team runs (breaches.h) found, per
// model and task: the attempts made, how many passed, and the breaches with
// their reasons. A breach is a suspicion for an engineer, not a verdict, so
// this board ranks nothing; it counts and lists.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/results/breaches.h"
#include "kforge/results/leaderboard.h"

namespace kforge::results {

// One model's red-team work on one task ("" task: the model's every task).
struct RedTeamRow {
  std::string model, task;
  int sessions = 0;
  int attempts = 0;  // turns: replies the model sent
  int kernels = 0;   // attempts whose reply held a kernel
  int passed = 0;    // attempts with a passed evaluation
  int breaches = 0;  // attempts with a recorded breach
  int reasons = 0;   // the breaches' reasons, summed
};

struct RedTeamBreach {
  std::string run, model, task, strategy;
  int64_t session_id = 0;
  int sample = 0;
  BreachRecord breach;
};

struct RedTeamBoard {
  std::vector<std::string> runs;     // the red-team runs read, by name
  std::vector<RedTeamRow> models;    // per model, by model
  std::vector<RedTeamRow> rows;      // per model and task, by model then task
  std::vector<RedTeamBreach> found;  // every breach, by run, session and turn
};

// Reads the red-team runs among `run_dirs` (IsRedTeamRun); the others are
// skipped. None at all is kNotFound naming the directories read.
Result<RedTeamBoard> LoadRedTeamBoard(const std::vector<std::filesystem::path>& run_dirs);

// Markdown (tables and the list of breaches), JSON ("kforge.redteam/1":
// {schema, runs, models[], rows[], breaches[]}), CSV (the per-task rows) or
// one self-contained HTML page.
std::string RenderRedTeam(const RedTeamBoard& board, LeaderboardFormat format);

}  // namespace kforge::results
