// The evaluator's front door: evaluate one kernel source for one task and get
// the `kforge.eval/1` JSON document (docs/eval-result.md).
//
// An Evaluator owns a pool of worker processes (one per rank) that it keeps
// across evaluations of the same task and world size; it is not thread-safe:
// one evaluation at a time per Evaluator (each GPU set gets its own).
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/evaluator/hardware.h"
#include "kforge/evaluator/task.h"

namespace kforge::eval {

// How long a timed baseline is reused by default (EvalOptions::baseline_reuse_s).
inline constexpr double kDefaultBaselineReuseS = 600;

struct EvalOptions {
  int world = 0;                         // 0: every visible GPU, at least the task's minimum
  std::vector<int> gpus;                 // empty: 0..n-1 of the visible GPUs
  std::optional<Dtype> dtype;            // empty: the task's default
  int trials = 5;                        // correctness trials, each with a fresh secret seed
  bool timing = true;                    // time candidate against baseline at the bench sizes
  std::vector<std::string> bench_sizes;  // labels; empty: all of the task's bench sizes
  std::filesystem::path cache_dir;       // compile cache; empty: DefaultCacheDir()
  std::string arch;                      // nvcc arch (sm_90a); empty: detect
  // Timed calls per bench size and side: until the median's 95% interval is
  // within +-timing_precision of it, or timing_cap_s wall seconds are spent.
  double timing_precision = 0.005;
  double timing_cap_s = 0.5;
  // A bench size's baseline timed by this evaluator at most this long ago
  // (same task, reference, size, dtype, W, GPUs and timing rule) is reused
  // instead of timed again around the candidate; 0: time it every evaluation.
  // The baseline is re-timed anyway when the candidate saw other SM clocks.
  double baseline_reuse_s = kDefaultBaselineReuseS;
  // A reused baseline stands only if its median lies within a fresh block's
  // 95% interval (a side's fewest calls: 20, or 10 where speedups are
  // indicative) widened by this fraction (negative: never, which tests use
  // to take the re-timing path).
  double baseline_confirm_slack = 0.01;
  double setup_deadline_s = 60;
  double check_deadline_s = 60;
  double timing_deadline_s = 300;
  // The wall time the candidate's own calls (its kf_setup, correctness calls
  // and timed calls) may take over the whole evaluation, counted from the
  // first: every exchange with it gets the smaller of its phase's deadline
  // and what is left, so a kernel that stalls just under every per-call
  // deadline costs at most this, and gets a timeout.
  double candidate_budget_s = 120;
  double compile_timeout_s = 180;
  // Not empty: trial 0 of every check size writes each rank's inputs, outputs
  // and the oracle's expected outputs here as .npy with a manifest.json.
  std::filesystem::path dump_dir;
  bool compile_only = false;  // stop after compile + policy (no GPU needed)
  bool trusted = false;       // a task's own reference: exempt from the task's policy
  // One rank on one GPU with the NCCL backend (harness and kernel): exercises
  // every harness collective the kernel calls through real NCCL, where one GPU
  // cannot host two NCCL ranks. Checks only: W = 1 is no benchmark world size,
  // so the result is never timed and says "self_test".
  bool nccl_self_test = false;
  // After the timed calls of the last bench size, a few more calls through
  // rank 0's hardware counters (CUPTI's range profiler, in the candidate's
  // process): the result's "profile", advice for the model that never
  // changes a verdict or a timing (docs/eval-result.md).
  bool profile = false;
  // Times the task's expert kernel ([expert], the best known human kernel)
  // at every bench size, after the candidate has gone, in a trusted group of
  // its own, so that each timing entry also gives the speedup over it. Its
  // timing is reused like the baseline's; its failure only skips it.
  bool expert = true;
  // After this evaluation, start the served groups (candidate, reference,
  // expert) of the next evaluation of the same shape (W, GPUs, collectives,
  // profiling) in the background: spawned, sandboxed and CUDA-initialised,
  // each waits for that evaluation's arenas and kernel, so that its start-up
  // leaves the critical path
  // (docs/methodology.md, "Warm served groups"). Worth it only where the
  // evaluator serves more evaluations (kforge run, eval-server); a one-shot
  // `kforge eval` turns it off, so as not to start a group it never uses.
  bool warm_groups = true;
  // A red-team run's canary ("kforge-canary-" and 32 hex digits,
  // kforge/evaluator/canary.h; empty: none). Planted where only the trusted
  // side holds it (the harness group's environment and a private 0600 file)
  // and looked for in what the candidate produces (its outputs read back at
  // the check sizes, its stdout and stderr): found there, the verdict is
  // `integrity_violation`; the result says what was planted and where it
  // was found (`integrity.canary`, docs/eval-result.md).
  std::string canary;
};

class Evaluator {
 public:
  virtual ~Evaluator() = default;
  // Never fails for a kernel's faults: those are a status inside the document.
  // A Status error means kforge itself could not evaluate (no GPU, bad task).
  virtual Result<nlohmann::json> Evaluate(const Task& task, const std::string& kernel_source,
                                          const std::string& kernel_name,
                                          const EvalOptions& options) = 0;
};

// The real evaluator: nvcc + kforge-worker processes. `worker_path` empty:
// the kforge-worker next to the running executable. `card`: the probed card
// of the GPUs its evaluations use (options.gpus), so that a process probes
// once; without one the evaluator probes on its first evaluation.
std::unique_ptr<Evaluator> MakeEvaluator(std::filesystem::path worker_path = {},
                                         std::optional<HardwareCard> card = std::nullopt);

}  // namespace kforge::eval
