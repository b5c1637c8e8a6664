// Internal to the evaluator: the kforge.eval/1 document of one evaluation as
// it is written (docs/eval-result.md), with the wall clock of its phases.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "kforge/core/status.h"
#include "kforge/evaluator/evaluate.h"
#include "kforge/evaluator/task.h"

namespace kforge::eval {

struct EvalSession;

// The dtype an evaluation runs at: the one asked for, else the task's first.
Result<Dtype> ChosenDtype(const Task& task, const EvalOptions& options);

// A runtime error's message, with a word on the read-only inputs where the
// kernel faulted on an address while they were mapped read-only (a store to
// an input faults the same way as any illegal address).
std::string ExplainFault(const std::string& message, bool inputs_read_only);

class Attempt {
 public:
  Attempt(const Task& task, const std::string& source, const std::string& name, Dtype dtype,
          bool compile_only);
  Attempt(const Attempt&) = delete;
  Attempt& operator=(const Attempt&) = delete;

  nlohmann::json& doc() { return doc_; }
  // Records the wall seconds since the previous mark as `phase` (`phases_s`).
  void Mark(const std::string& phase);
  // Starts the next phase now, without recording the time since the last mark.
  void Restart() { last_ = std::chrono::steady_clock::now(); }

  // Ends the evaluation with a verdict: status, message, seconds, phases.
  void Finish(ErrorKind kind, const std::string& message);
  bool finished() const { return finished_; }

  // The verdict once every phase that ran is recorded in `s`: integrity
  // findings reject the kernel whatever else happened, then the phases'
  // status, then the pass with its geometric-mean speedup.
  void FinishFrom(const EvalSession& s, const Status& phases);

 private:
  nlohmann::json doc_;
  nlohmann::json phases_ = nlohmann::json::object();
  bool compile_only_ = false, finished_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_ = start_;
};

}  // namespace kforge::eval
