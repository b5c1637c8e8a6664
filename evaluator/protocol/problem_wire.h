// The instantiated problem on the wire: the coordinator instantiates a task
// once and sends the Problem (every shape, dtype, tolerance, init and group
// already evaluated) to the workers, which never read task.toml themselves.
#pragma once

#include <nlohmann/json.hpp>

#include "kforge/core/status.h"
#include "kforge/evaluator/task.h"

namespace kforge::eval::proto {

nlohmann::json ProblemToJson(const Problem& p);

// Strict: every field is checked (types, ranges, shapes against numel and
// nbytes, per-rank shapes against the world size). The result's `task` is null.
Result<Problem> ProblemFromJson(const nlohmann::json& j);

// The scalar params a kernel sees (kf_ctx param_names/values): the task's
// params and the size variables, without W and elem (the ctx has them).
std::vector<std::pair<std::string, double>> KernelParams(const Problem& p);

}  // namespace kforge::eval::proto
