// Internal to the evaluator: driving a served group's (the reference's, the
// candidate's or the expert's) timed calls through the harness (drive.cc).
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>

#include "protocol/messages.h"
#include "session.h"

namespace kforge::eval {

// Appends each failure's report to `mismatches` (with its call's index when
// `with_call`).
void AddFailures(const std::vector<proto::Failure>& failures, nlohmann::json* mismatches,
                 bool with_call);

// One block of the drive: `warmup` verified but untimed calls, then `calls`
// timed ones, appended to `out`. `profile`: the calls are profiled, and rank
// 0's reply lands there.
Status DriveBlock(EvalSession& s, ServedGroup& g, SizePlan& plan, int warmup, int calls, Side* out,
                  nlohmann::json* profile = nullptr);

// Blocks of driven calls until the median of the claimed times is precise
// enough or the size's cap is spent (run/timing_rule.h).
Status TimedCalls(EvalSession& s, ServedGroup& g, SizePlan& plan, Side* out);

// Untimed calls in front of each side's first block: the same for the
// reference and the candidate.
int DriveWarmup(const SizePlan& plan);

double SecondsSince(std::chrono::steady_clock::time_point t0);

}  // namespace kforge::eval
