// The task's expert kernel in an evaluation: what the result says of it, its
// timing after the candidate (run/expert.cc), and its part of each timing
// entry. Internal to the evaluator.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "run/session.h"
#include "run/stats.h"

namespace kforge::eval {

// The expert's compiled object, or why there is none to time.
struct ExpertObject {
  std::filesystem::path object;
  std::string error;
};

// The result's "expert" before timing: {kernel, technique} or {none}; null
// when the task's [expert] is not stated.
nlohmann::json ExpertStatement(const Task& task);
// Whether this evaluation times the task's expert kernel.
bool ExpertToTime(const Task& task, const EvalOptions& options);
// Times (or reuses) the expert at every bench size with a timed baseline; a
// failure is written into s.expert_report ("skipped") and changes nothing else.
void TimeExpert(EvalSession& s, const ExpertObject& expert);
// The "expert" object of a timing entry (null when it was not timed there),
// beside the baseline's and the candidate's statistics at that size.
nlohmann::json ExpertEntry(const SizePlan& plan, const TimingStats& baseline,
                           const TimingStats& candidate);

}  // namespace kforge::eval
