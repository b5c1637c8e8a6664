// Adapters from the agent's ports to the real modules: kforge_providers
// (models) and kforge_results (the run store); the prompt's inputs from a task
// (kforge_evaluator). The evaluator needs none: EvalPort is its own interface.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kforge/agent/ports.h"
#include "kforge/agent/prompt.h"
#include "kforge/agent/run_config.h"
#include "kforge/agent/strategy.h"
#include "kforge/core/status.h"

namespace kforge::eval {
struct Task;
}

namespace kforge::agent {

// One providers::Client per model spec, made on first use. Thread-safe.
std::unique_ptr<LlmPort> MakeProviderLlm();
// The same, with every model's client made up front: kInvalidInput naming
// each model whose spec, provider, API key or cassette is unusable (nothing
// is sent to any model).
// `registries`: extra model registry files (after the built-in one and the
// user's models.toml). `record`: a cassette every exchange that reaches a
// provider is appended to (docs/providers.md), empty for none. `use_cache`:
// false neither reads nor writes the response cache (`kforge run --no-cache`).
Result<std::unique_ptr<LlmPort>> MakeProviderLlmFor(const std::vector<std::string>& models,
                                                    const std::vector<std::string>& registries = {},
                                                    const std::filesystem::path& record = {},
                                                    bool use_cache = true);

// The run store at `run_dir` (results::RunStore).
Result<std::unique_ptr<StorePort>> OpenRunStore(const std::filesystem::path& run_dir);
// A new run store at `run_dir` (results::RunStore::Create): kInvalidInput
// when a store is already there, also one another process just created.
Result<std::unique_ptr<StorePort>> CreateRunStore(const std::filesystem::path& run_dir);

// Everything the prompt builder needs for one task: the evaluator's task card
// at (world, dtype), the ABI header, the reference source and, for strategies
// that want one, the task's first hand-written solution.
// Refuses (kInvalidInput) a world size or dtype the task does not declare,
// or sizes that do not instantiate (kforge/evaluator/task_select.h, eval::CheckTaskProblem).
Result<PromptInputs> TaskPromptInputs(const eval::Task& task, int world, const std::string& dtype,
                                      const Strategy& strategy, const std::string& hardware_card);

}  // namespace kforge::agent
