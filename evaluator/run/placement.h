// Internal to the evaluator: where an evaluation's ranks run.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/evaluator/evaluate.h"
#include "kforge/evaluator/hardware.h"
#include "kforge/evaluator/task.h"

namespace kforge::eval {

struct Placement {
  int world = 0;
  std::vector<int> devices;  // [rank]: the GPU index it runs on
  bool emulated = false;     // more ranks than GPUs: ranks share a GPU
};

// W ranks over the chosen GPUs (options.gpus, else every GPU of `card`),
// round robin; W is options.world, else the smallest world size of the task
// that covers the GPUs, else its largest.
Result<Placement> Place(const Task& task, const HardwareCard& card, const EvalOptions& options);

// nvcc's -arch: the one asked for, else the card's first GPU's (sm_90a for
// Hopper's arch-specific features), else sm_90a when there is no card.
std::string TargetArch(const HardwareCard& card, const std::string& asked);

}  // namespace kforge::eval
