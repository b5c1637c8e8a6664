#include "kforge/results/eval_doc.h"

#include "kforge/core/json.h"

namespace kforge::results {

Result<EvalSummary> ReadEvalDoc(const nlohmann::json& doc) {
  if (!doc.is_object())
    return Error(ErrorKind::kInvalidInput, "evaluation document: not a JSON object");
  const std::string schema = JsonString(doc, "schema", "kforge.eval/1");
  if (schema != "kforge.eval/1") {
    return Error(ErrorKind::kInvalidInput, "evaluation document: field \"schema\" is \"" + schema +
                                               "\", expected \"kforge.eval/1\"");
  }
  EvalSummary c;
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
  c.emulated = JsonBool(doc, "emulated");
  c.seconds = JsonNumber(doc, "seconds");
  c.world = static_cast<int>(JsonIntIn(doc, "world", 0, 1 << 20, 0));
  c.message = JsonString(doc, "message");
  // busbw of the largest bench size: the figure nccl-tests readers compare.
  const nlohmann::json& timing = JsonField(doc, "timing");
  if (timing.is_array()) {
    double best_bytes = -1;
    for (const auto& t : timing) {
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

Result<EvalSummary> ParseEvalDoc(std::string_view text) {
  KF_ASSIGN_OR_RETURN(nlohmann::json doc, ParseJson(text, "evaluation document"));
  return ReadEvalDoc(doc);
}

}  // namespace kforge::results
