// Internal to the evaluator: the state of one evaluation while its phases run.
//
// Three rank groups take part (protocol/messages.h): the trusted harness group
// (warm across evaluations; owns the memory, computes the expected outputs,
// keeps the clock), and two served groups of this evaluation, both sandboxed
// candidate-role workers driven through mailboxes: the reference group (the
// task's reference, the baseline) and the candidate group. The baseline and
// the candidate are timed by one path, so a difference between their times
// is a difference between the kernels (docs/methodology.md).
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kforge/evaluator/evaluate.h"
#include "kforge/evaluator/task.h"
#include "protocol/mailbox.h"
#include "protocol/messages.h"
#include "run/roofline.h"
#include "run/timing_rule.h"
#include "run/worker_group.h"
#include "sandbox/supervisor.h"
#include "task/inputs.h"

namespace kforge::eval {

class BaselineCache;
class WarmGroups;

// The timed calls of one side (the baseline or the candidate) at one size:
// the served group's claimed event times and the harness's wall times (max
// over ranks), and the harness's NVML readings of every rank's GPU around
// each block.
struct Side {
  std::vector<double> claimed_us, wall_us, sm_clock_mhz, temperature_c;
  // Per call: the wall time the claims leave unexplained (run/stats.h
  // CallGaps), and the spread of the ranks' wall times.
  std::vector<double> gap_us, spread_us;
  // The calls of each driven block, in order (claimed_us is their
  // concatenation): the interval of the median rests on their spread.
  std::vector<int> blocks;
  void Append(const Side& more) {
    blocks.insert(blocks.end(), more.blocks.begin(), more.blocks.end());
    for (auto [to, from] :
         {std::pair{&claimed_us, &more.claimed_us}, std::pair{&wall_us, &more.wall_us},
          std::pair{&gap_us, &more.gap_us}, std::pair{&spread_us, &more.spread_us},
          std::pair{&sm_clock_mhz, &more.sm_clock_mhz},
          std::pair{&temperature_c, &more.temperature_c}}) {
      to->insert(to->end(), from->begin(), from->end());
    }
  }
};

// One size of the evaluation, instantiated once.
// What the reference group's timing of a bench size established; a reused
// baseline (run/baseline_cache.h) restores it whole.
struct BaselineTiming {
  Side side;                           // its calls, before and after the candidate
  double before_us = 0, after_us = 0;  // their medians
  int warmup = 0;                      // the probe's untimed calls before each side's first block
  double call_wall_us = 0;             // the wall time of one driven call (sizes the blocks)
};

// What the expert's group established at a bench size: its calls, or why it
// has none. Reused with the baseline (run/baseline_cache.h).
struct ExpertTiming {
  Side side;
  double reused_age_s = -1;  // >= 0: reused from an evaluation timed this long ago
  // A reused record's times were multiplied by `scale` (this evaluation's
  // baseline median over the one it was timed beside); its interval is
  // widened to [scale_lo, scale_hi], that ratio's own (run/expert.cc).
  double scale = 1, scale_lo = 1, scale_hi = 1;
};

struct SizePlan {
  SizeSpec size;
  Problem problem;
  bool check = false;       // a check size (oracle) or a bench size (baseline, timing)
  int sets = 1;             // input/output sets (rotated so timed calls miss L2)
  BaselineTiming baseline;  // the reference group's
  Side candidate;           // the candidate's calls
  ExpertTiming expert;      // the task's expert kernel's calls, when it has one
  // >= 0: the baseline was reused from an earlier evaluation timed this long
  // ago (run/baseline_cache.h), and this is its n-th reuse.
  double reused_baseline_age_s = -1;
  int reused_baseline_uses = 0;
  double confirm_median_us = 0;  // the fresh block that confirmed a reused baseline
  bool BaselineReused() const { return reused_baseline_age_s >= 0; }
  // Back to "to be timed": the reused record no longer stands (the probe's
  // warm-up and call time stay: they only size the blocks).
  void DropReusedBaseline() {
    baseline.side = Side{};
    baseline.before_us = baseline.after_us = 0;
    reused_baseline_age_s = -1;
    reused_baseline_uses = 0;
  }
  nlohmann::json entry;  // the timing entry, finished by FinishTiming
};

// A served group: W sandboxed candidate-role workers with a mailbox each and
// the supervisor of their seccomp notifications, serving one kernel's calls.
struct ServedGroup {
  explicit ServedGroup(std::string w) : who(std::move(w)) {}
  std::string who;  // "candidate" | "reference" | "expert"
  std::unique_ptr<WorkerGroup> group;
  std::vector<proto::Mailbox> mailboxes;  // [rank]
  std::unique_ptr<sandbox::Supervisor> supervisor;
  std::filesystem::path dir;  // the kernel's private copy; removed when the group stops
  bool collectives = false;   // may call the harness collectives
  // Its processes (the last it started) were started ahead (run/warm_groups.h).
  bool warm = false;
  // What it was spawned with, once it was (kept when it stops: the refill
  // of the next evaluation's group for the same purpose).
  std::optional<GroupOptions> shape;
  double overhead_us = 0;  // calibrated mailbox overhead per call
  // The next call number on this group's mailboxes: each mailbox starts at
  // 0 and accepts only the number after the last one answered.
  uint64_t next_seq = 1;
  // The supervisor's violations [first, second) came during profiled calls
  // (CUPTI's own, e.g. a refused symlink): refused like any, listed in the
  // profile, and not judged, since the verdict was settled before them.
  std::pair<size_t, size_t> profiled_violations{0, 0};
  bool reference() const { return who == "reference"; }
  // Trusted code (the task's reference or its expert kernel): what goes wrong
  // in its calls is kforge's, never a verdict on the candidate.
  bool trusted() const { return who != "candidate"; }
  bool alive() const { return group && group->alive(); }
};

// The baseline's largest relative RMS error against the oracle for one
// output, over the check sizes and trials of this evaluation, and where.
struct BaselineError {
  double rms_vs_oracle = -1;  // < 0: not measured (task/compare.h kNotMeasured)
  std::string size;
};

struct EvalSession {
  const Task* task = nullptr;
  Dtype dtype{};
  int world = 0;
  std::vector<int> devices;  // [rank] -> GPU
  bool emulated = false;
  const EvalOptions* options = nullptr;
  std::filesystem::path worker;
  std::string mps_dir;
  std::map<std::string, std::string> worker_env;
  size_t l2_bytes = 50u << 20;
  Peaks peaks;               // of the evaluation's GPU, for the floor of each bench size
  std::random_device seeds;  // fresh, secret seeds: never derived from anything a kernel sees
  BaselineCache* baselines = nullptr;  // the evaluator's, across evaluations
  // The evaluator's warm served groups; null: every group started by its
  // evaluation.
  WarmGroups* warm_groups = nullptr;
  std::filesystem::path reference_object;

  std::vector<SizePlan> plans;
  WorkerGroup* harness = nullptr;
  // The candidate arenas as the harness shares them ([rank], from its alloc),
  // the descriptors of split ones (two per rank in rank order, owned: closed
  // with the session), and why they are not split when they could have been.
  std::vector<proto::ArenaShare> candidate_arenas;
  std::vector<int> candidate_arena_fds;
  std::string readonly_refused;
  ServedGroup reference{"reference"}, candidate{"candidate"}, expert{"expert"};
  // The result's "expert": the task's [expert] and what became of it (timed,
  // reused, skipped and why, or none and why); null when the task states none.
  nlohmann::json expert_report;

  nlohmann::json checks = nlohmann::json::array();
  nlohmann::json timing = nlohmann::json::array();
  nlohmann::json sandbox_report;  // the candidate's layers (rank 0's, or the first partial)
  nlohmann::json integrity = nlohmann::json::array();  // findings that reject the kernel
  nlohmann::json profile;  // EvalOptions::profile: rank 0's counters, or why there are none
  nlohmann::json failure;  // the error / timeout object of the result, when one happened
  // What the candidate's processes wrote to stdout and stderr: bounded,
  // printable, and only ever in the document (WorkerGroup::CapturedOutput).
  nlohmann::json candidate_output = nlohmann::json::array();
  int trials_passed = 0;
  // [output]: the baseline's error against the oracle, measured at the check
  // sizes (baseline_error.cc); empty until one was.
  std::vector<BaselineError> baseline_error;
  // Wall seconds spent so far in exchanges that wait on the candidate's code
  // (EvalOptions::candidate_budget_s; CandidateTime).
  double candidate_spent_s = 0;
  // EvalOptions::canary: what it is looked for as (run/canary_scan.h), where
  // it was planted (run/canary.h) and where it was first found ("" while not).
  std::vector<std::string> canary_needles;
  std::vector<std::string> canary_planted;
  std::string canary_found;
  // The exchange under way had its deadline cut to what was left of the
  // budget: its timeout is the budget's (GroupFailed says so).
  bool budget_cut_deadline = false;

  // A task's own reference (trusted) may use what its task forbids candidates.
  bool CandidateMayUseCollectives() const {
    return task->policy.harness_collectives || options->trusted;
  }

  // More ranks than this sharing one GPU time-slice it, and their speedups
  // repeat only to about +-15% (docs/methodology.md, "Known limits").
  static constexpr int kRepeatableSharedRanks = 4;
  bool SpeedupsIndicative() const { return emulated && world > kRepeatableSharedRanks; }
  // How far a fresh block may put a reused baseline record off and still
  // confirm it: EvalOptions::baseline_confirm_slack, and at least
  // kIndicativeConfirmSlack where speedups are indicative (re-timing a record
  // for a 2% disagreement buys nothing where they repeat to +-15%).
  static constexpr double kIndicativeConfirmSlack = 0.05;
  double ConfirmSlack() const {
    const double slack = options->baseline_confirm_slack;
    return slack >= 0 && SpeedupsIndicative() ? std::max(slack, kIndicativeConfirmSlack) : slack;
  }

  // Where speedups are indicative, each side's median is timed to +-2% at
  // most finely (EvalOptions::timing_precision, +-0.5% by default,
  // elsewhere), for at most a quarter of a second (EvalOptions::timing_cap_s,
  // 0.5 s by default, elsewhere) and from 10 calls (20 elsewhere): calls
  // beyond that buy nothing where evaluations repeat only to +-15%, and at
  // W = 8 on one GPU a large size's call costs 40 ms of staging and
  // verification (docs/methodology.md, "Known limits").
  static constexpr double kIndicativePrecision = 0.02;
  static constexpr double kIndicativeCapS = 0.25;
  static constexpr int kIndicativeMinCalls = 10;
  TimingRule Rule() const {
    TimingRule r;
    r.precision = options->timing_precision;
    r.cap_s = options->timing_cap_s;
    if (SpeedupsIndicative()) {
      r.precision = std::max(r.precision, kIndicativePrecision);
      r.cap_s = std::min(r.cap_s, kIndicativeCapS);
      r.min_calls = kIndicativeMinCalls;
    }
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
// Starts a served group (the reference group before any candidate code
// exists, the candidate group after the baseline is timed): its processes
// (a warm group for its purpose from s.warm_groups where one waits), the
// kernel's private copy in their directory, sandbox, arenas, calibration,
// then the kernel.
Status StartServed(EvalSession& s, ServedGroup& g, const std::filesystem::path& kernel_so);
// Whether `g`'s kernel may call the harness collectives: the reference's
// always, the candidate's and the expert's where the task allows it.
bool MayUseCollectives(const EvalSession& s, const ServedGroup& g);
// What `g`'s processes are spawned with in this evaluation (its warm-group
// shape, run/warm_groups.h).
GroupOptions ServedShape(const EvalSession& s, const ServedGroup& g);
// Ends a served group; the candidate's supervisor findings become integrity
// findings, the reference's a harness warning.
void StopServed(EvalSession& s, ServedGroup& g);
// Times the baseline (the reference group) at every bench size: after =
// false before any candidate code exists, true after the candidate group is
// gone (a reused baseline: only after, confirmed by a short block or timed
// in full).
Status TimeBaselines(EvalSession& s, bool after);

// Times the expert's group at every bench size whose baseline is timed, with
// the baseline's warm-up and blocks; run after the baseline's last block.
// The first failure is returned (the caller only skips the expert for it).
Status TimeExpertSides(EvalSession& s);

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
// The harness's configure: the same, with the RMS bounds against the baseline
// (RmsVsBaseline) at a bench size.
nlohmann::json HarnessConfigureMessage(const EvalSession& s, const SizePlan& plan);
nlohmann::json InputsMessage(EvalSession& s, const std::vector<int>& sets);

// Counts the wall time of one exchange that waits on the candidate's code
// (its kf_setup, a correctness call, a drive of its timed calls) against
// EvalOptions::candidate_budget_s, and gives it the deadline that leaves:
// the smaller of its phase's own and what is left of the budget. For a
// trusted group (`counts` false) it counts nothing and changes no deadline.
class CandidateTime {
 public:
  CandidateTime(EvalSession& s, bool counts);
  ~CandidateTime();
  CandidateTime(const CandidateTime&) = delete;
  CandidateTime& operator=(const CandidateTime&) = delete;
  double Deadline(double phase_s);

 private:
  EvalSession& s_;
  bool counts_;
  std::chrono::steady_clock::time_point start_;
};

// Turns a failed group exchange into the result's error/timeout object (a
// timeout once the candidate's budget is spent says so).
Status GroupFailed(EvalSession& s, const WorkerGroup& g, const Status& st);
// One message to every rank of `g` and their replies; a failure fills the
// result's error object (GroupFailed).
Result<std::vector<Message>> Exchange(EvalSession& s, WorkerGroup& g, const nlohmann::json& msg,
                                      double deadline_s, const std::string& phase);

// baseline_error.cc. Whether a check size runs the baseline to measure its
// error against the oracle (an output with an RMS bound and enough elements).
bool MeasuresBaselineError(const SizePlan& plan);
// Compares the baseline's outputs of one trial ([rank][output], raw bytes)
// with the oracle's and keeps the largest error per output in
// s.baseline_error; returns {output: this trial's largest over ranks}.
nlohmann::json RecordBaselineError(EvalSession& s, const SizePlan& plan,
                                   const std::vector<std::vector<std::vector<char>>>& baseline,
                                   const OracleIo& io);
// Per output of `p`, the RMS bound against the baseline's outputs
// (task/compare.h AgainstBaseline with the measured error); empty when
// nothing was measured (the harness then applies the unmeasured bound).
std::vector<double> RmsVsBaseline(const EvalSession& s, const Problem& p);
// The `vs_baseline` entry of a bench size's check (docs/eval-result.md).
nlohmann::json VsBaselineReport(const EvalSession& s, const Problem& p);

// Compares one rank's output (raw bytes) with the oracle's expectation; null
// when it passes, else a `mismatches` entry of docs/eval-result.md.
nlohmann::json CheckAgainstOracle(const Problem& p, int rank, int output, const void* got,
                                  const OracleIo& expected, const HostInputs& inputs,
                                  uint32_t poison);

}  // namespace kforge::eval
