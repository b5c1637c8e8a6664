// Internal to the evaluator: the state of one evaluation while its phases run.
//
// Two rank groups take part (protocol/messages.h): the trusted harness group
// (warm across evaluations; owns the memory, runs the baseline, keeps the
// clock) and this evaluation's sandboxed candidate group (fresh for every
// evaluation, killed before the baseline is timed a second time).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kforge/evaluator/evaluate.h"
#include "kforge/evaluator/task.h"
#include "protocol/mailbox.h"
#include "run/roofline.h"
#include "run/timing_rule.h"
#include "run/worker_group.h"
#include "sandbox/supervisor.h"
#include "task/inputs.h"

namespace kforge::eval {

// One size of the evaluation, instantiated once.
struct SizePlan {
  SizeSpec size;
  Problem problem;
  bool check = false;               // a check size (oracle) or a bench size (baseline, timing)
  int sets = 1;                     // input/output sets (rotated so timed calls miss L2)
  std::vector<double> baseline_us;  // the baseline's event times, before and after
  double baseline_before_us = 0, baseline_after_us = 0;  // their medians
  int warmup = 0;                           // the baseline's untimed calls before its first block
  double call_wall_us = 0;                  // the wall time of one baseline call (sizes the blocks)
  nlohmann::json entry;                     // the timing entry, finished by FinishTiming
  std::vector<double> claimed_us, wall_us;  // the candidate's timed calls (max over ranks)
  // NVML readings of every rank's GPU around each block of baseline calls.
  std::vector<double> sm_clock_mhz, temperature_c;
};

struct EvalSession {
  const Task* task = nullptr;
  Dtype dtype{};
  int world = 0;
  bool emulated = false;
  const EvalOptions* options = nullptr;
  std::filesystem::path worker;
  std::string mps_dir;
  std::map<std::string, std::string> worker_env;
  size_t l2_bytes = 50u << 20;
  Peaks peaks;               // of the evaluation's GPU, for the floor of each bench size
  std::random_device seeds;  // fresh, secret seeds: never derived from anything a kernel sees

  std::vector<SizePlan> plans;
  WorkerGroup* harness = nullptr;
  std::vector<std::string> candidate_handles;  // [rank], from the harness's alloc
  std::unique_ptr<WorkerGroup> candidate;
  std::vector<proto::Mailbox> mailboxes;  // [rank]
  std::unique_ptr<sandbox::Supervisor> supervisor;
  std::filesystem::path candidate_dir;  // removed when the evaluation ends
  uint64_t next_seq = 1;                // the next mailbox call number
  double overhead_us = 0;               // calibrated mailbox overhead per call

  nlohmann::json checks = nlohmann::json::array();
  nlohmann::json timing = nlohmann::json::array();
  nlohmann::json sandbox_report;  // the candidate's layers (rank 0's, or the first partial)
  nlohmann::json integrity = nlohmann::json::array();  // findings that reject the kernel
  nlohmann::json failure;  // the error / timeout object of the result, when one happened
  int trials_passed = 0;

  // A task's own reference (trusted) may use what its task forbids candidates.
  bool CandidateMayUseCollectives() const {
    return task->policy.harness_collectives || options->trusted;
  }

  TimingRule Rule() const {
    TimingRule r;
    r.precision = options->timing_precision;
    r.cap_s = options->timing_cap_s;
    return r;
  }

  uint64_t NewSeed() { return (static_cast<uint64_t>(seeds()) << 32) ^ seeds(); }
  // A poison pattern no kernel can predict, and that no float dtype reads as
  // a finite value near anything (every 16-bit half is NaN or Inf; a double
  // made of two halves is ~1e306).
  uint32_t NewPoison() { return seeds() | 0x7F807F80u; }
  ~EvalSession();
};

// The sizes of the evaluation (check sizes, then the selected bench sizes).
Status PlanSizes(EvalSession& s);
// Alloc + peers in the harness group for every size of the plan; loads the
// baseline.
Status PrepareHarness(EvalSession& s, const std::filesystem::path& baseline);
// Times the baseline at every bench size (after = false: before any candidate
// code exists; true: after the candidate group is gone).
Status TimeBaselines(EvalSession& s, bool after);
// Starts the candidate group: sandbox, arenas, calibration, then the kernel.
Status StartCandidate(EvalSession& s, const std::filesystem::path& kernel_so);
// Ends the candidate group and collects the supervisor's findings.
void StopCandidate(EvalSession& s);

// Correctness at one check size over options->trials trials, against the
// oracle. kMismatch / kRuntimeError / kDeadlock / kHarness on failure (with
// session.failure filled for the last three).
Status RunCheckSize(EvalSession& s, SizePlan& plan);
// One bench size: candidate vs baseline outputs, then timed calls, each verified.
Status RunBenchSize(EvalSession& s, SizePlan& plan);
// The timing entry of a bench size, once both baseline timings are known.
void FinishTiming(EvalSession& s);

// Messages both groups get: the problem of a size, fresh inputs for sets.
nlohmann::json ConfigureMessage(const EvalSession& s, const SizePlan& plan, bool collectives);
nlohmann::json InputsMessage(EvalSession& s, const std::vector<int>& sets);

// Turns a failed group exchange into the result's error/timeout object.
Status GroupFailed(EvalSession& s, const WorkerGroup& g, const Status& st);
// One message to every rank of `g` and their replies; a failure fills the
// result's error object (GroupFailed).
Result<std::vector<Message>> Exchange(EvalSession& s, WorkerGroup& g, const nlohmann::json& msg,
                                      double deadline_s, const std::string& phase);

// Compares one rank's output (raw bytes) with the oracle's expectation; null
// when it passes, else a `mismatches` entry of docs/eval-result.md.
nlohmann::json CheckAgainstOracle(const Problem& p, int rank, int output, const void* got,
                                  const OracleIo& expected, const HostInputs& inputs,
                                  uint32_t poison);

}  // namespace kforge::eval
