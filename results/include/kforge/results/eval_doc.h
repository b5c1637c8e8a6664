// The one reader of a kforge.eval/1 document (docs/eval-result.md) outside
// the evaluator that writes it: the store indexes these fields, the agent
// classifies and ranks candidates by them. Tolerant of absent optional
// fields; strict about the fields every document must have.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "kforge/core/status.h"

namespace kforge::results {

struct EvalSummary {
  std::string status;                // passed | mismatch | ... | compiled; never empty
  std::optional<double> speedup;     // only when passed; > 0
  std::optional<double> busbw_gbps;  // of the largest bench size
  bool emulated = false;
  double seconds = 0;
  int world = 0;
  std::string message;
};

// kInvalidInput naming the field when `doc` is not an object, its schema is
// not kforge.eval/1, its status is missing, or a speedup is not > 0.
Result<EvalSummary> ReadEvalDoc(const nlohmann::json& doc);
Result<EvalSummary> ParseEvalDoc(std::string_view text);

}  // namespace kforge::results
