// The evaluation's canary (EvalOptions::canary): a red-team run's random
// token, "kforge-canary-" and 32 hex digits, that the evaluator plants where
// only its trusted side holds it and looks for in what the candidate produces
// (docs/integrity.md, "kforge red-teams kforge"). Never a real secret: a
// marker that cannot appear by chance.
#pragma once

#include <string_view>

namespace kforge::eval {

// The variable of the harness group's environment that holds the canary; no
// candidate process is ever given it (run/worker_group.h).
inline constexpr const char* kEvalCanaryEnv = "KFORGE_EVAL_CANARY";
inline constexpr std::string_view kCanaryPrefix = "kforge-canary-";

// True for "kforge-canary-" followed by exactly 32 lower-case hex digits.
bool IsCanaryToken(std::string_view token);

}  // namespace kforge::eval
