// The task as a model sees it: one markdown card that the prompt builder
// includes next to the reference source and the ABI header.
#pragma once

#include <string>

#include "kforge/evaluator/task.h"

namespace kforge::eval {

// Renders `task` at world size `world` and dtype `dtype`: description, every
// tensor with its concrete shapes at every check and bench size, params,
// tolerances, the timing rule, the policy and the ABI contract. Sizes that do
// not instantiate are shown with their error instead of failing the card.
std::string RenderTaskCard(const Task& task, int world, Dtype dtype);

}  // namespace kforge::eval
