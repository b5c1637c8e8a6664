#include "eval_doc.h"

namespace kforge::results::internal {

std::string JsonString(const nlohmann::json& j, const char* key, std::string fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

double JsonNumber(const nlohmann::json& j, const char* key, double fallback) {
  return JsonOptNumber(j, key).value_or(fallback);
}

std::optional<double> JsonOptNumber(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

Result<nlohmann::json> ParseJson(std::string_view text, std::string_view what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return Error(ErrorKind::kInvalidInput, std::string(what) + ": not valid JSON");
  return j;
}

Result<EvalColumns> ExtractEvalColumns(const nlohmann::json& doc) {
  if (!doc.is_object())
    return Error(ErrorKind::kInvalidInput, "evaluation document: not a JSON object");
  const std::string schema = JsonString(doc, "schema", "kforge.eval/1");
  if (schema != "kforge.eval/1") {
    return Error(ErrorKind::kInvalidInput, "evaluation document: field \"schema\" is \"" + schema +
                                               "\", expected \"kforge.eval/1\"");
  }
  EvalColumns c;
  c.status = JsonString(doc, "status");
  if (c.status.empty()) {
    return Error(ErrorKind::kInvalidInput,
                 "evaluation document: field \"status\" is missing or not a string");
  }
  // The schema promises no speedup unless passed; a stray one is not trusted.
  if (c.status == "passed") c.speedup = JsonOptNumber(doc, "speedup");
  if (c.speedup && !(*c.speedup > 0)) {
    return Error(ErrorKind::kInvalidInput, "evaluation document: field \"speedup\" must be > 0");
  }
  auto em = doc.find("emulated");
  c.emulated = em != doc.end() && em->is_boolean() && em->get<bool>();
  c.seconds = JsonNumber(doc, "seconds");
  c.world = static_cast<int>(JsonNumber(doc, "world"));
  c.message = JsonString(doc, "message");
  // busbw of the largest bench size: the figure nccl-tests readers compare.
  auto timing = doc.find("timing");
  if (timing != doc.end() && timing->is_array()) {
    double best_bytes = -1;
    for (const auto& t : *timing) {
      auto bw = JsonOptNumber(t, "busbw_gbps");
      const double bytes = JsonNumber(t, "bytes");
      if (bw && bytes >= best_bytes) {
        best_bytes = bytes;
        c.busbw_gbps = bw;
      }
    }
  }
  return c;
}

Result<EvalColumns> ParseEvalDoc(std::string_view text) {
  KF_ASSIGN_OR_RETURN(nlohmann::json doc, ParseJson(text, "evaluation document"));
  return ExtractEvalColumns(doc);
}

}  // namespace kforge::results::internal
