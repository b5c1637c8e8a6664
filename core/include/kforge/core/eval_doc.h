// The kforge.eval/1 document's contract (docs/eval-result.md): its schema
// name, the typed verdict every module branches on, and the one reader of
// its summary. The evaluator writes the document (evaluator/run/attempt.cc
// sets the verdict through VerdictName and nothing else); the store, the
// agent and the reports read it here, so that no module compares a status
// string of its own.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "kforge/core/status.h"

namespace kforge {

inline constexpr std::string_view kEvalSchema = "kforge.eval/1";

// What the harness decided about one kernel. Its names ("passed",
// "compile_error", ...) are the document's "status" and the store's column.
enum class Verdict {
  kPassed,              // correct on every check; timed when a GPU ran it
  kCompiled,            // compiled and passed the policy check; no GPU ran it
  kCompileError,        // nvcc refused it
  kPolicyViolation,     // it uses something its task forbids
  kIntegrityViolation,  // its process broke the sandbox or the timing protocol
  kRuntimeError,        // it crashed or a CUDA call failed
  kMismatch,            // its outputs are wrong
  kTimeout,             // a rank missed a phase deadline
  kHarnessError,        // kforge could not judge it (not the kernel's fault)
};

inline constexpr Verdict kAllVerdicts[] = {Verdict::kPassed,
                                           Verdict::kCompiled,
                                           Verdict::kCompileError,
                                           Verdict::kPolicyViolation,
                                           Verdict::kIntegrityViolation,
                                           Verdict::kRuntimeError,
                                           Verdict::kMismatch,
                                           Verdict::kTimeout,
                                           Verdict::kHarnessError};

std::string_view VerdictName(Verdict verdict);
// nullopt for a name that is none of VerdictName's.
std::optional<Verdict> ParseVerdict(std::string_view name);

// The verdict an evaluation that ended with `kind` gets: kOk is kPassed (the
// caller makes it kCompiled when nothing ran), a deadlock or a timeout is
// kTimeout, and every kind that is not the kernel's is kHarnessError.
Verdict VerdictFor(ErrorKind kind);

// A judgement of the model's kernel: every verdict but kCompiled (nothing
// judged it yet) and kHarnessError (kforge failed). Only these count in a
// correctness figure.
bool JudgesTheKernel(Verdict verdict);
// A verdict only a kernel that ran on a GPU gets.
bool CameFromAGpu(Verdict verdict);

// The fields of a document that the store indexes and the agent ranks by.
struct EvalSummary {
  Verdict verdict = Verdict::kHarnessError;
  std::optional<double> speedup;  // only when passed; > 0
  // Only when passed and the task's expert kernel was timed: the candidate's
  // speed over the expert's (geomean over bench sizes); > 0.
  std::optional<double> expert_speedup;
  std::optional<double> busbw_gbps;  // of the largest bench size
  bool emulated = false;
  double seconds = 0;
  int world = 0;
  std::string message;
};

// kInvalidInput naming the field when `doc` is not an object, its schema is
// not kforge.eval/1, its status is missing or no verdict's name, or a
// speedup is not > 0. Tolerant of absent optional fields.
Result<EvalSummary> ReadEvalSummary(const nlohmann::json& doc);
Result<EvalSummary> ParseEvalSummary(std::string_view text);

}  // namespace kforge
