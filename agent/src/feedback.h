// The feedback composer: turns an evaluation (kforge.eval/1) into the text the
// model reads next, through the strategy's template for the outcome.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kforge/agent/outcome.h"
#include "kforge/agent/strategy.h"
#include "kforge/core/status.h"

namespace kforge::agent {

struct FeedbackInput {
  Outcome outcome = Outcome::kHarnessError;
  nlohmann::json eval = nlohmann::json::object();  // the document; empty for kNoKernel
  std::string source;           // the kernel, for quoting the lines diagnostics point at
  std::string kernel_name;      // the file name diagnostics use
  std::string extract_problem;  // kNoKernel: why no kernel was found
  int turn = 1;                 // 1-based round of this candidate
  int turns = 1;                // rounds in the session
  double link_peak_gbps = 0;    // per-GPU NVLink peak from the hardware card; 0: unknown
};

// The template view: every field the feedback templates may use (docs/agent.md).
nlohmann::json FeedbackView(const FeedbackInput& in);

// Renders the strategy's template for in.outcome.
Result<std::string> ComposeFeedback(const Strategy& strategy, const FeedbackInput& in);

}  // namespace kforge::agent
