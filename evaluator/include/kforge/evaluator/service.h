// The evaluator as a service: one request in, one `kforge.eval/1` document
// out. The local implementation owns an Evaluator bound to a GPU set; the
// remote one (kforge/remote/client.h) sends the request to an eval-server,
// which serves it with a local one. `kforge run` hands either to the agent,
// which sees only this interface.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/evaluator/evaluate.h"

namespace kforge::eval {

struct Task;

// How long a remote evaluation service may stay silent before its jobs go to
// another (0: no health checks).
inline constexpr double kDefaultEvaluatorLivenessS = 60;

// The range a timing cap may be asked in (`--timing-cap`, EvalRequest).
inline constexpr double kMinTimingCapS = 0.01;
inline constexpr double kMaxTimingCapS = 600;
// 0 (the evaluator's default) or within [kMinTimingCapS, kMaxTimingCapS].
constexpr bool TimingCapAllowed(double cap_s) {
  return cap_s == 0 || (cap_s >= kMinTimingCapS && cap_s <= kMaxTimingCapS);
}

struct EvalRequest {
  std::string task;         // task key, e.g. "001_allreduce"
  std::string source;       // the kernel
  std::string kernel_name;  // file name for diagnostics, e.g. "turn2.cu"
  int world = 0;
  std::string dtype;  // empty: the task's default
  bool compile_only = false;
  // Also profile the kernel after its timed calls (EvalOptions::profile);
  // ignored when compile_only.
  bool profile = false;
  // A red-team run's canary (EvalOptions::canary); empty: none.
  std::string canary;
  // > 0: each side of each bench size is timed for at most this many wall
  // seconds (EvalOptions::timing_cap_s, `--timing-cap`); 0: the evaluator's
  // default.
  double timing_cap_s = 0;
};

// One evaluation at a time per instance (a local one owns worker processes
// bound to a GPU set). A Status error means kforge could not evaluate at all;
// a kernel's faults are a status inside the document.
class EvalService {
 public:
  virtual ~EvalService() = default;
  virtual Result<nlohmann::json> Evaluate(const EvalRequest& request) = 0;
};

// The evaluations of this machine over `tasks` (which must outlive it), bound
// to `gpus` (empty: the evaluator's default). `baseline_reuse_s`: how long a
// baseline this service timed is reused (EvalOptions::baseline_reuse_s; 0:
// timed around every candidate). `warm_groups`: after each evaluation, the
// served groups of the next one of the same shape are started ahead
// (EvalOptions::warm_groups).
std::unique_ptr<EvalService> MakeLocalEvalService(const std::vector<Task>* tasks,
                                                  std::vector<int> gpus,
                                                  double baseline_reuse_s = kDefaultBaselineReuseS,
                                                  bool warm_groups = true);

}  // namespace kforge::eval
