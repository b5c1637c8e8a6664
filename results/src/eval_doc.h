// Reads the columns the store indexes out of a kforge.eval/1 document
// (docs/eval-result.md). Tolerant of absent optional fields; strict about
// the fields every document must have.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "kforge/core/status.h"

namespace kforge::results::internal {

struct EvalColumns {
  std::string status;
  std::optional<double> speedup;
  std::optional<double> busbw_gbps;
  bool emulated = false;
  double seconds = 0;
  int world = 0;
  std::string message;
};

Result<EvalColumns> ExtractEvalColumns(const nlohmann::json& doc);
Result<EvalColumns> ParseEvalDoc(std::string_view text);

// Tolerant getters for untrusted JSON: the fallback when absent or mistyped.
std::string JsonString(const nlohmann::json& j, const char* key, std::string fallback = "");
double JsonNumber(const nlohmann::json& j, const char* key, double fallback = 0);
std::optional<double> JsonOptNumber(const nlohmann::json& j, const char* key);
// Parses without throwing; `what` names the source in the error.
Result<nlohmann::json> ParseJson(std::string_view text, std::string_view what);

}  // namespace kforge::results::internal
