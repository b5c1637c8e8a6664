#include "kforge/agent/prompt.h"

#include "kforge/agent/template.h"

namespace kforge::agent {

nlohmann::json PromptView(const Strategy& strategy, const PromptInputs& in) {
  nlohmann::json view = {{"task_key", in.task_key},
                         {"task_title", in.task_title},
                         {"world", in.world},
                         {"dtype", in.dtype},
                         {"task_card", in.task_card},
                         {"hardware_card", in.hardware_card},
                         {"has_hardware", !in.hardware_card.empty()},
                         {"abi_header", in.abi_header},
                         {"reference_source", in.reference_source},
                         {"turns", strategy.turns},
                         {"samples", strategy.samples},
                         {"multi_turn", strategy.turns > 1}};
  if (strategy.example && !in.example_source.empty()) {
    view["example"] = {{"name", in.example_name}, {"source", in.example_source}};
  }
  return view;
}

Result<Prompt> BuildPrompt(const Strategy& strategy, const PromptInputs& in) {
  nlohmann::json view = PromptView(strategy, in);
  Prompt p;
  KF_ASSIGN_OR_RETURN(
      p.system, RenderTemplate(strategy.system_template, view, strategy.name + " system template"));
  KF_ASSIGN_OR_RETURN(
      p.user, RenderTemplate(strategy.user_template, view, strategy.name + " user template"));
  return p;
}

}  // namespace kforge::agent
