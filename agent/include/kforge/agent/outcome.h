// What became of one candidate kernel: the outcomes the refinement loop and
// the feedback templates branch on.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

namespace kforge::agent {

enum class Outcome {
  kNoKernel,  // the reply held no usable kernel
  kCompileError,
  kPolicyViolation,
  kRuntimeError,
  kHang,  // a rank missed a phase deadline
  kMismatch,
  kSlow,          // correct, not faster than the baseline
  kFast,          // correct and faster than the baseline
  kCompiled,      // compiled; not evaluated (no GPU)
  kHarnessError,  // kforge failed, not the kernel
};

inline constexpr Outcome kAllOutcomes[] = {
    Outcome::kNoKernel,     Outcome::kCompileError, Outcome::kPolicyViolation,
    Outcome::kRuntimeError, Outcome::kHang,         Outcome::kMismatch,
    Outcome::kSlow,         Outcome::kFast,         Outcome::kCompiled,
    Outcome::kHarnessError};

// "no_kernel", "compile_error", ... (also the feedback template keys).
std::string_view OutcomeName(Outcome outcome);
std::optional<Outcome> ParseOutcome(std::string_view name);

bool IsCorrect(Outcome outcome);

// Maps a kforge.eval/1 document to an outcome. `compile_only`: a document
// that got past compile and policy counts as kCompiled.
Outcome ClassifyEvaluation(const nlohmann::json& doc, bool compile_only);
// The geometric-mean speedup of a passed evaluation's document, else 0.
double EvalSpeedup(const nlohmann::json& doc);

// How far a candidate got, for ranking: higher is better. Correct kernels
// rank above every failure and among themselves by speedup.
double ProgressScore(Outcome outcome, double speedup);

}  // namespace kforge::agent
