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
// How far this evaluation's baseline may be from the one an expert record was
// timed beside for the record to be reused, rescaled (run/expert.cc).
inline constexpr double kExpertRescaleLimit = 0.05;
// Whether this evaluation times the task's expert kernel.
bool ExpertToTime(const Task& task, const EvalOptions& options);
// Times (or reuses) the expert at every bench size with a timed baseline; a
// failure is written into s.expert_report ("skipped") and changes nothing else.
void TimeExpert(EvalSession& s, const ExpertObject& expert);
// The bench plans with a timed baseline and no expert record of `object` to
// reuse (the others get the record's times, rescaled: kExpertRescaleLimit).
int ReuseExperts(EvalSession& s, const std::filesystem::path& object);
// Records the experts timed now, each with the baseline it was timed beside.
void RecordExperts(EvalSession& s, const std::filesystem::path& object);
// The "expert" object of a timing entry (null when it was not timed there),
// beside the baseline's and the candidate's statistics at that size.
nlohmann::json ExpertEntry(const SizePlan& plan, const TimingStats& baseline,
                           const TimingStats& candidate);

}  // namespace kforge::eval
