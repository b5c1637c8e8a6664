// `kforge show`: a run's sessions turn by turn, as plain text.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "kforge/core/status.h"
#include "kforge/results/store.h"

namespace kforge::results {

struct ShowOptions {
  std::string task;      // "" = every task
  std::string model;     // "" = every model
  std::string strategy;  // "" = every strategy
  int sample = -1;       // -1 = every sample
  int64_t session = -1;  // -1 = every session; else the one of this id (show prints it)
  bool full = false;     // print prompts, replies and kernels whole (else the first lines)
  int max_lines = 40;
};

// Whether `options` select session `s` (task, model, strategy, sample, id).
bool ShowSelects(const SessionRecord& s, const ShowOptions& options);

// For each matching session: its key and state, then every turn's prompt,
// reply, kernel (the first in full, later ones as a diff to the previous
// kernel), evaluations and feedback. No match is kNotFound.
Result<std::string> RenderShowText(const RunStore& store, const ShowOptions& options);

// The same sessions as a "kforge.show/1" document (`kforge show --json`;
// schema in docs/cli.md), every text whole (`full` and `max_lines` do not
// apply). No match is kNotFound.
Result<nlohmann::json> RenderShowJson(const RunStore& store, const ShowOptions& options);

}  // namespace kforge::results
