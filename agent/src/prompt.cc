#include "kforge/agent/prompt.h"

#include "template.h"

namespace kforge::agent {
namespace {

// Blocks inserted whole (cards, sources) end without a newline, so that the
// template alone decides the spacing around them: "```cuda\n{{{source}}}\n```".
std::string Block(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

}  // namespace

nlohmann::json PromptView(const Strategy& strategy, const PromptInputs& in) {
  nlohmann::json view = {{"task_key", in.task_key},
                         {"task_title", in.task_title},
                         {"world", in.world},
                         {"dtype", in.dtype},
                         {"task_card", Block(in.task_card)},
                         {"hardware_card", Block(in.hardware_card)},
                         {"has_hardware", !in.hardware_card.empty()},
                         {"abi_header", Block(in.abi_header)},
                         {"reference_source", Block(in.reference_source)},
                         {"turns", strategy.turns},
                         {"samples", strategy.samples},
                         {"multi_turn", strategy.turns > 1}};
  if (strategy.example && !in.example_source.empty()) {
    view["example"] = {{"name", in.example_name}, {"source", Block(in.example_source)}};
  }
  if (strategy.redteam) {
    view["redteam"] = {{"integrity", Block(in.integrity_doc)},
                       {"methodology", Block(in.methodology_doc)}};
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
