#include "run/attempt.h"

#include <algorithm>
#include <cmath>

#include "kforge/core/eval_doc.h"
#include "kforge/core/hash.h"
#include "kforge/core/log.h"
#include "kforge/core/untrusted_text.h"
#include "kforge/core/version.h"
#include "run/canary.h"
#include "run/session.h"

namespace kforge::eval {

using nlohmann::json;

Result<Dtype> ChosenDtype(const Task& task, const EvalOptions& options) {
  Dtype dtype = options.dtype.value_or(task.dtypes.front());
  if (std::find(task.dtypes.begin(), task.dtypes.end(), dtype) == task.dtypes.end()) {
    return Error(ErrorKind::kInvalidInput,
                 "task " + task.key + " has no dtype " + std::string(DtypeName(dtype)));
  }
  return dtype;
}

Attempt::Attempt(const Task& task, const std::string& source, const std::string& name, Dtype dtype,
                 bool compile_only)
    : doc_({{"schema", kEvalSchema},
            {"task", task.key},
            {"kernel", {{"path", name}, {"sha256", Sha256Hex(source)}}},
            {"dtype", std::string(DtypeName(dtype))},
            {"kforge", {{"version", Version()}, {"commit", GitCommit()}}}}),
      compile_only_(compile_only) {}

std::string ExplainFault(const std::string& message, bool inputs_read_only) {
  if (!inputs_read_only || (message.find("IllegalAddress") == std::string::npos &&
                            message.find("illegal memory access") == std::string::npos)) {
    return message;
  }
  return message + " (the kernel's inputs are mapped read-only: a store to one faults like this)";
}

void Attempt::Mark(const std::string& phase) {
  auto now = std::chrono::steady_clock::now();
  phases_[phase] = std::chrono::duration<double>(now - last_).count();
  last_ = now;
}

void Attempt::Finish(ErrorKind kind, const std::string& message) {
  const Verdict verdict =
      compile_only_ && kind == ErrorKind::kOk ? Verdict::kCompiled : VerdictFor(kind);
  doc_["status"] = VerdictName(verdict);
  doc_["message"] = message;
  doc_["seconds"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  doc_["phases_s"] = phases_;
  finished_ = true;
}

void Attempt::FinishFrom(const EvalSession& s, const Status& st) {
  doc_["correctness"] = {
      {"trials", s.options->trials}, {"passed_trials", s.trials_passed}, {"checks", s.checks}};
  doc_["timing"] = s.timing;
  doc_["sandbox"] = s.sandbox_report;
  if (!s.candidate_output.empty()) doc_["candidate_output"] = s.candidate_output;
  if (!s.profile.is_null()) doc_["profile"] = s.profile;
  if (!s.expert_report.is_null()) doc_["expert"] = s.expert_report;
  doc_["integrity"] = {{"harness_overhead_us", s.candidate.overhead_us}, {"findings", s.integrity}};
  const bool read_only = !s.candidate_arenas.empty() && s.candidate_arenas[0].split();
  if (!s.candidate_arenas.empty()) {
    json inputs = {{"read_only", read_only}, {"mapping", read_only ? "cuda_vmm" : "cuda_ipc"}};
    if (!s.readonly_refused.empty()) inputs["reason"] = s.readonly_refused;
    doc_["integrity"]["inputs"] = inputs;
  }
  if (!s.options->canary.empty())
    doc_["integrity"]["canary"] = CanaryReport(s.canary_planted, s.canary_found);
  if (!s.failure.is_null())
    doc_[st.kind() == ErrorKind::kDeadlock ? "timeout" : "error"] = s.failure;
  // Whatever else happened, a kernel whose process broke the sandbox or the
  // timing protocol is rejected for that.
  if (!s.integrity.empty()) {
    const json& m = s.integrity[0].value("message", json());
    Finish(ErrorKind::kIntegrityViolation,
           "integrity_violation: " + (m.is_string() ? m.get<std::string>() : m.dump()));
    return;
  }
  if (!st.ok()) {
    if (st.kind() == ErrorKind::kHarness)
      LogWarn("evaluator", "{}", PrintableText(st.message(), /*keep_newlines=*/false));
    const std::string why = st.kind() == ErrorKind::kRuntimeError
                                ? ExplainFault(st.message(), read_only)
                                : st.message();
    Finish(st.kind(), std::string(VerdictName(VerdictFor(st.kind()))) + ": " + why);
    return;
  }
  std::string msg = "passed: " + std::to_string(s.trials_passed) + " trials over " +
                    std::to_string(s.task->check_sizes.size()) + " check sizes";
  if (!s.timing.empty()) {
    double logsum = 0;
    for (const auto& t : s.timing) logsum += std::log(std::max(t["speedup"].get<double>(), 1e-9));
    double geo = std::exp(logsum / static_cast<double>(s.timing.size()));
    doc_["speedup"] = geo;
    msg += "; speedup " + std::to_string(geo).substr(0, 5) + "x (geomean over " +
           std::to_string(s.timing.size()) + " bench sizes)" + (s.emulated ? ", emulated" : "");
    // Against the expert: over the sizes where it was timed.
    double elog = 0;
    int timed = 0;
    for (const auto& t : s.timing) {
      const json& e = t.value("expert", json());
      if (!e.is_object()) continue;
      elog += std::log(std::max(e.value("speedup", 0.0), 1e-9));
      ++timed;
    }
    if (timed > 0) {
      const double vs = std::exp(elog / timed);
      doc_["expert_speedup"] = vs;
      msg += "; " + std::to_string(vs).substr(0, 5) + "x the expert's speed";
    }
  }
  Finish(ErrorKind::kOk, msg);
}

}  // namespace kforge::eval
