#include "kforge/core/eval_doc.h"

#include "kforge/core/json.h"

namespace kforge {

std::string_view VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPassed:
      return "passed";
    case Verdict::kCompiled:
      return "compiled";
    case Verdict::kCompileError:
      return "compile_error";
    case Verdict::kPolicyViolation:
      return "policy_violation";
    case Verdict::kIntegrityViolation:
      return "integrity_violation";
    case Verdict::kRuntimeError:
      return "runtime_error";
    case Verdict::kMismatch:
      return "mismatch";
    case Verdict::kTimeout:
      return "timeout";
    case Verdict::kHarnessError:
      return "harness_error";
  }
  return "harness_error";
}

std::optional<Verdict> ParseVerdict(std::string_view name) {
  for (Verdict v : kAllVerdicts) {
    if (VerdictName(v) == name) return v;
  }
  return std::nullopt;
}

Verdict VerdictFor(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kOk:
      return Verdict::kPassed;
    case ErrorKind::kCompileError:
      return Verdict::kCompileError;
    case ErrorKind::kPolicyViolation:
      return Verdict::kPolicyViolation;
    case ErrorKind::kIntegrityViolation:
      return Verdict::kIntegrityViolation;
    case ErrorKind::kRuntimeError:
      return Verdict::kRuntimeError;
    case ErrorKind::kMismatch:
      return Verdict::kMismatch;
    case ErrorKind::kDeadlock:
    case ErrorKind::kTimeout:
      return Verdict::kTimeout;
    default:
      return Verdict::kHarnessError;
  }
}

bool JudgesTheKernel(Verdict verdict) {
  return verdict != Verdict::kCompiled && verdict != Verdict::kHarnessError;
}

bool CameFromAGpu(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPassed:
    case Verdict::kIntegrityViolation:
    case Verdict::kRuntimeError:
    case Verdict::kMismatch:
    case Verdict::kTimeout:
      return true;
    default:
      return false;
  }
}

Result<EvalSummary> ReadEvalSummary(const nlohmann::json& doc) {
  if (!doc.is_object())
    return Error(ErrorKind::kInvalidInput, "evaluation document: not a JSON object");
  const std::string schema = JsonString(doc, "schema", std::string(kEvalSchema));
  if (schema != kEvalSchema) {
    return Error(ErrorKind::kInvalidInput, "evaluation document: field \"schema\" is \"" + schema +
                                               "\", expected \"" + std::string(kEvalSchema) + "\"");
  }
  const std::string status = JsonString(doc, "status");
  if (status.empty()) {
    return Error(ErrorKind::kInvalidInput,
                 "evaluation document: field \"status\" is missing or not a string");
  }
  std::optional<Verdict> verdict = ParseVerdict(status);
  if (!verdict) {
    return Error(ErrorKind::kInvalidInput, "evaluation document: field \"status\" is \"" + status +
                                               "\", not a verdict (docs/eval-result.md)");
  }
  EvalSummary c;
  c.verdict = *verdict;
  // The schema promises no speedup unless passed; a stray one is not trusted.
  if (c.verdict == Verdict::kPassed) {
    c.speedup = JsonOptNumber(doc, "speedup");
    c.expert_speedup = JsonOptNumber(doc, "expert_speedup");
    if (c.expert_speedup && !(*c.expert_speedup > 0)) {
      return Error(ErrorKind::kInvalidInput,
                   "evaluation document: field \"expert_speedup\" must be > 0");
    }
  }
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

Result<EvalSummary> ParseEvalSummary(std::string_view text) {
  KF_ASSIGN_OR_RETURN(nlohmann::json doc, ParseJson(text, "evaluation document"));
  return ReadEvalSummary(doc);
}

}  // namespace kforge
