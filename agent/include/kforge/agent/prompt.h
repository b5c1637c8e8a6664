// The prompt builder: the first message of every lineage, from the strategy's
// system and user templates, the task card and the hardware card.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kforge/agent/strategy.h"
#include "kforge/core/status.h"

namespace kforge::agent {

struct PromptInputs {
  std::string task_key;  // "001_allreduce"
  std::string task_title;
  int world = 0;
  std::string dtype;
  std::string
      task_card;  // markdown from the evaluator (heading, W, dtype, description, shapes, policy)
  std::string hardware_card;     // markdown (RenderHardwareCard); empty when unknown
  std::string abi_header;        // kforge/kernel.h, verbatim
  std::string reference_source;  // the task's reference.cu (the baseline), verbatim
  std::string example_name;      // a hand-written solution shown as an example; empty: none
  std::string example_source;
  // Only for a red-team strategy: docs/integrity.md and docs/methodology.md, verbatim.
  std::string integrity_doc;
  std::string methodology_doc;
};

struct Prompt {
  std::string system;
  std::string user;
};

// The template view: task_key, task_title, world, dtype, task_card,
// hardware_card, has_hardware, abi_header, reference_source, example
// {name, source} (absent when none), redteam {integrity, methodology} (only
// for a red-team strategy), turns, samples, multi_turn. The cards and
// sources lose their trailing newlines: the template places every blank line.
// The task card already carries the task's heading, W and dtype.
nlohmann::json PromptView(const Strategy& strategy, const PromptInputs& in);

Result<Prompt> BuildPrompt(const Strategy& strategy, const PromptInputs& in);

}  // namespace kforge::agent
