#include "kforge/agent/outcome.h"

#include <string>

#include "kforge/core/eval_doc.h"

namespace kforge::agent {

std::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kNoKernel:
      return "no_kernel";
    case Outcome::kCompileError:
      return "compile_error";
    case Outcome::kPolicyViolation:
      return "policy_violation";
    case Outcome::kRuntimeError:
      return "runtime_error";
    case Outcome::kHang:
      return "hang";
    case Outcome::kMismatch:
      return "mismatch";
    case Outcome::kSlow:
      return "slow";
    case Outcome::kFast:
      return "fast";
    case Outcome::kCompiled:
      return "compiled";
    case Outcome::kHarnessError:
      return "harness_error";
  }
  return "unknown";
}

std::optional<Outcome> ParseOutcome(std::string_view name) {
  for (Outcome o : kAllOutcomes) {
    if (OutcomeName(o) == name) return o;
  }
  return std::nullopt;
}

bool IsCorrect(Outcome outcome) { return outcome == Outcome::kSlow || outcome == Outcome::kFast; }

Outcome ClassifyEvaluation(const nlohmann::json& doc, bool compile_only) {
  // A document that is not one (no status, another schema) is the harness's.
  Result<EvalSummary> e = ReadEvalSummary(doc);
  if (!e.ok()) return Outcome::kHarnessError;
  switch (e->verdict) {
    case Verdict::kCompileError:
      return Outcome::kCompileError;
    // A process that broke the sandbox or the timing protocol is told so as
    // a policy violation (the message says which).
    case Verdict::kPolicyViolation:
    case Verdict::kIntegrityViolation:
      return Outcome::kPolicyViolation;
    case Verdict::kHarnessError:
      return Outcome::kHarnessError;
    default:
      break;
  }
  if (compile_only) return Outcome::kCompiled;
  switch (e->verdict) {
    case Verdict::kRuntimeError:
      return Outcome::kRuntimeError;
    case Verdict::kTimeout:
      return Outcome::kHang;
    case Verdict::kMismatch:
      return Outcome::kMismatch;
    case Verdict::kPassed:
      return e->speedup.value_or(0) > 1.0 ? Outcome::kFast : Outcome::kSlow;
    default:
      // kCompiled from an evaluation that was to run: nothing judged it.
      return Outcome::kHarnessError;
  }
}

// The geometric-mean speedup of a passed evaluation's document, else 0.
double EvalSpeedup(const nlohmann::json& doc) {
  Result<EvalSummary> e = ReadEvalSummary(doc);
  return e.ok() ? e->speedup.value_or(0.0) : 0.0;
}

double ProgressScore(Outcome outcome, double speedup) {
  switch (outcome) {
    case Outcome::kFast:
    case Outcome::kSlow:
      return 10.0 + speedup;
    case Outcome::kMismatch:
      return 5;
    case Outcome::kRuntimeError:
    case Outcome::kHang:
      return 4;
    case Outcome::kCompiled:
      return 3.5;
    case Outcome::kPolicyViolation:
      return 3;
    case Outcome::kCompileError:
      return 2;
    case Outcome::kNoKernel:
      return 1;
    case Outcome::kHarnessError:
      return 0;
  }
  return 0;
}

}  // namespace kforge::agent
