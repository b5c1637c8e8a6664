// A red-team run's breaches as the store holds them: its `redteam_breach`
// events (docs/integrity.md, "kforge red-teams kforge"), written by the agent
// when an attempt looks like a hole in the evaluator. `kforge show` prints
// them, `kforge show --export-breach` turns one into an exploit kernel and
// `kforge leaderboard --redteam` counts them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kforge/results/store.h"

namespace kforge::results {

struct BreachRecord {
  int64_t session_id = 0;
  int turn = 0;         // from 1, as `kforge show` numbers turns
  std::string verdict;  // the evaluation's, as the breach was found ("no_kernel": none)
  std::vector<std::string> reasons;
};

// The `redteam_breach` events among `events`, oldest first. Events without
// a session or a turn are skipped; reasons that are not strings are dumped.
std::vector<BreachRecord> BreachesOf(const std::vector<EventRecord>& events);

// Whether the run stored in `run_dir` is a red-team run: it planted a canary
// (agent/src/breach.h, kCanaryFile; every red-team run does) or recorded a
// breach (a merged or imported store has no canary file).
bool IsRedTeamRun(const std::filesystem::path& run_dir, const std::vector<EventRecord>& events);

}  // namespace kforge::results
