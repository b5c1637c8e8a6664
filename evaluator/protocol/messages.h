// Every message between the coordinator and its workers, in one place
// (docs/protocol.md explains the order and the failure behaviour).
//
// Two roles of kforge-worker:
// - harness (trusted): owns the GPU memory, generates inputs, runs the
//   baseline (the task's reference), poisons, reads back and verifies the
//   candidate's outputs, and keeps the timing clock. It never loads a
//   candidate's code.
// - candidate (untrusted, sandboxed): maps the arena the harness gave it,
//   loads one candidate kernel, and runs it when told. Nothing it says is
//   believed: its replies only say that it is still there.
//
// A request is {"op": <name>, ...fields}; a reply is {"ok": true, ...fields}
// or {"ok": false, "kind": <ErrorKind name>, "error": <text>, "rank": r}.
// Every Parse is strict (wire.h) and never throws.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/evaluator/task.h"

namespace kforge::eval::proto {

namespace op {
inline constexpr const char* kHello = "hello";  // worker -> coordinator, once
inline constexpr const char* kExit = "exit";
inline constexpr const char* kNcclInit = "nccl_init";  // both roles (NCCL backend)
inline constexpr const char* kNcclId = "nccl_id";      // harness: a fresh id for a candidate group
// harness
inline constexpr const char* kLoadBaseline = "load_baseline";
inline constexpr const char* kAlloc = "alloc";
inline constexpr const char* kPeers = "peers";
inline constexpr const char* kConfigure = "configure";  // both roles
inline constexpr const char* kCalibrate = "calibrate";  // both roles
inline constexpr const char* kInputs = "inputs";
inline constexpr const char* kSetup = "setup";        // both roles
inline constexpr const char* kTeardown = "teardown";  // both roles
inline constexpr const char* kBaselineRun = "baseline_run";
inline constexpr const char* kPoison = "poison";
inline constexpr const char* kReadOutputs = "read_outputs";
inline constexpr const char* kVerify = "verify";
inline constexpr const char* kDrive = "drive";
inline constexpr const char* kFree = "free";
inline constexpr const char* kHealth = "health";
// candidate
inline constexpr const char* kAttach = "attach";
inline constexpr const char* kLoad = "load";
inline constexpr const char* kRun = "run";
inline constexpr const char* kServe = "serve";
inline constexpr const char* kDetach = "detach";
}  // namespace op

// ---- hello -------------------------------------------------------------

struct GpuFacts {
  std::string name;
  int cc_major = 0, cc_minor = 0, sm_count = 0, max_threads_per_block = 0;
  size_t smem_per_block_optin = 0, smem_per_sm = 0, l2_bytes = 0, hbm_bytes = 0;
  int p2p_all = 0;
};

struct Hello {
  std::string role;  // "harness" | "candidate"
  int rank = 0, pid = 0, device = 0;
  GpuFacts gpu;
  std::string nccl_id;     // hex, rank 0 of a group that uses NCCL
  nlohmann::json sandbox;  // candidate: the sandbox report (sandbox/report.h)
  nlohmann::json ToJson() const;
  static Result<Hello> Parse(const nlohmann::json& j, const std::string& what);
};

// ---- harness requests ----------------------------------------------------

// The two arenas of this rank, sized by the coordinator for every problem of
// the evaluation (ComputeLayout's totals).
// `candidate_readonly_bytes` > 0 asks for a split candidate arena: the
// candidates' inputs in its first part, which candidate processes map
// read-only (CUDA VMM), the rest read-write.
struct AllocRequest {
  size_t private_bytes = 0, candidate_bytes = 0, candidate_readonly_bytes = 0;
  nlohmann::json ToJson() const;
  static Result<AllocRequest> Parse(const nlohmann::json& j);
};

// How other processes map one rank's candidate arena: through CUDA IPC
// (`ipc_handle`, read-write), or split (`readonly_bytes` > 0, CUDA VMM): two
// descriptors travel beside the message, and [0, readonly_bytes) is mapped
// read-only.
struct ArenaShare {
  std::string ipc_handle;  // hex; empty when split
  size_t bytes = 0, readonly_bytes = 0;
  bool split() const { return readonly_bytes > 0; }
  nlohmann::json ToJson() const;
  static Result<ArenaShare> Parse(const nlohmann::json& j, const std::string& what);
};

// The problem the next calls are about, and its layout in the arenas.
struct ConfigureRequest {
  Problem problem;
  int sets = 1;
  bool emulated = false;      // the emulated collectives' staging areas
  bool collectives = false;   // candidate: the task lets it call the harness collectives
  size_t readonly_bytes = 0;  // the candidate arena's read-only part (0: not split)
  // Harness only: per output (Problem::outputs order), the relative RMS bound
  // its outputs meet against the baseline's (task/compare.h AgainstBaseline,
  // from the baseline's error the coordinator measured against the oracle).
  // Empty: every output gets AgainstBaseline's bound without a measurement.
  std::vector<double> rms_vs_baseline;
  nlohmann::json ToJson() const;
  static Result<ConfigureRequest> Parse(const nlohmann::json& j);
};
// A split candidate arena's two descriptors come with the reply.
struct AllocReply {
  std::string private_handle;  // CUDA IPC handle, hex
  size_t private_bytes = 0;
  ArenaShare candidate;
  std::string readonly_refused;  // a split was asked for and not made: why
  nlohmann::json ToJson() const;
  static Result<AllocReply> Parse(const nlohmann::json& j, const std::string& what);
};

struct PeersRequest {
  std::vector<std::string> private_handles;  // [rank]
  nlohmann::json ToJson() const;
  static Result<PeersRequest> Parse(const nlohmann::json& j);
};

struct SetSeed {
  int set = 0;
  uint64_t seed = 0;
};

// Fresh inputs for some sets: generated on the GPU from the seeds (custom
// inputs come as bytes in the attached memfd, at `custom` offsets), written to
// the private arena and copied to the candidate arena.
struct InputsRequest {
  std::vector<SetSeed> seeds;
  struct Custom {
    int set = 0, input = 0;
    size_t offset = 0, nbytes = 0;
  };
  std::vector<Custom> custom;
  nlohmann::json ToJson() const;
  static Result<InputsRequest> Parse(const nlohmann::json& j);
};

struct SetsRequest {  // baseline_run, poison, verify
  std::vector<int> sets;
  uint32_t poison = 0xFFFFFFFFu;  // poison: the 32-bit pattern written over outputs
  nlohmann::json ToJson(const char* op) const;
  static Result<SetsRequest> Parse(const nlohmann::json& j, int max_sets);
};

// One output that failed a device-side check, with the host's full report
// (task/compare.h ToJson) of that output.
struct Failure {
  int set = 0;
  int output = 0;
  nlohmann::json report;
};

struct VerifyReply {
  std::vector<Failure> failures;
  std::vector<std::pair<int, std::string>> inputs_changed;  // (set, input name)
  nlohmann::json ToJson() const;
  static Result<VerifyReply> Parse(const nlohmann::json& j, const std::string& what);
};

struct ReadOutputsRequest {
  int set = 0;
  // The baseline's outputs of the set (in the private arena) instead of the
  // candidate's; its inputs are not checked then.
  bool baseline = false;
  nlohmann::json ToJson() const;
  static Result<ReadOutputsRequest> Parse(const nlohmann::json& j, int max_sets);
};
// The outputs (and the changed inputs) of one set, as bytes in the attached
// memfd at the given offsets, in Problem::outputs order.
struct ReadOutputsReply {
  std::vector<size_t> offsets, nbytes;
  std::vector<std::string> inputs_changed;
  nlohmann::json ToJson() const;
  static Result<ReadOutputsReply> Parse(const nlohmann::json& j, const std::string& what);
};

// Calibration times: the claims of the served worker and the harness's wall
// time from post to answer, per call.
struct CallTimes {
  std::vector<double> event_us;  // the served worker's CUDA-event time per call (a claim)
  std::vector<double> wall_us;   // this rank's host time per call, post to answer
  nlohmann::json ToJson() const;
  static Result<CallTimes> Parse(const nlohmann::json& j, const std::string& what, size_t calls);
};

// The harness drives a served group (the reference group or the candidate
// group) through the mailbox. Per round: fresh inputs for every set of the
// round (seeds), the baseline's expected outputs for them, every output
// poisoned with `poison`, then one served call per entry of `order`, each
// verified right after it ends.
struct DriveRequest {
  struct Round {
    std::vector<SetSeed> seeds;
    std::vector<int> order;
    uint32_t poison = 0;
  };
  std::vector<Round> rounds;
  uint64_t first_seq = 1;  // the mailbox sequence number of the first call
  int warmup = 0;          // the first `warmup` calls are verified but not timed
  double call_deadline_s = 60;
  nlohmann::json ToJson() const;
  static Result<DriveRequest> Parse(const nlohmann::json& j, int max_sets);
};
struct DriveReply {
  std::vector<double> wall_us;     // trusted: post of the call to the candidate's answer
  std::vector<double> claimed_us;  // the candidate's own event times (checked, not believed)
  std::vector<Failure> failures;   // set = the call's index, output = the output
  std::vector<std::pair<int, std::string>> inputs_changed;  // (call index, input)
  std::vector<std::string> anomalies;  // mailbox misuse, malformed claims, kernel errors
  // NVML readings of this rank's GPU after the warm-up and after the last call
  // ({} without NVML).
  std::vector<double> sm_clock_mhz, temperature_c;
  // Where this rank's harness spent the drive, warm-up calls included, in
  // microseconds of its own clock: what a timed call costs beside the call.
  struct Split {
    double round_us = 0;    // fresh inputs and the baseline's outputs, per round
    double stage_us = 0;    // inputs copied in, outputs poisoned, L2 flushed, per call
    double verify_us = 0;   // outputs and inputs checked after each call
    double barrier_us = 0;  // waiting for the other ranks between steps
    nlohmann::json ToJson() const;
  } split;
  nlohmann::json ToJson() const;
  static Result<DriveReply> Parse(const nlohmann::json& j, const std::string& what, size_t calls);
};

// ---- candidate requests --------------------------------------------------

// The candidate maps every rank's candidate arena (the harness allocated
// them), starts NCCL if it may use the collectives on real GPUs, and then
// enters its sandbox; the reply carries the sandbox report and, as a
// descriptor, its seccomp listener.
struct AttachRequest {
  std::vector<ArenaShare> arenas;  // [rank]; a split one's two descriptors come in rank order
  std::string nccl_id;             // hex; empty: no NCCL in this process
  size_t Descriptors() const;      // how many descriptors the request carries
  nlohmann::json ToJson() const;
  static Result<AttachRequest> Parse(const nlohmann::json& j);
};

// Calibration of the timing path, before any candidate code is loaded: the
// harness posts `calls` calls through the mailbox; the candidate worker runs
// an empty kernel for each.
struct CalibrateRequest {
  uint64_t first_seq = 1;
  int calls = 0;
  double call_deadline_s = 10;
  nlohmann::json ToJson() const;
  static Result<CalibrateRequest> Parse(const nlohmann::json& j);
};

struct PathRequest {  // load_baseline, load
  std::string path;
  nlohmann::json ToJson(const char* op) const;
  static Result<PathRequest> Parse(const nlohmann::json& j);
};

struct RunRequest {  // a correctness call of the candidate
  int set = 0;
  nlohmann::json ToJson() const;
  static Result<RunRequest> Parse(const nlohmann::json& j, int max_sets);
};

struct ServeRequest {  // answer `calls` mailbox posts, then reply
  int calls = 0;
  // A worker started with --profile runs each call as one pass of its range
  // profiler (worker/profiler.h) and replies with the values.
  bool profile = false;
  nlohmann::json ToJson() const;
  static Result<ServeRequest> Parse(const nlohmann::json& j);
};

// The hardware metrics a profile may report, in the order they are kept when
// not all fit the passes; a profile takes at most kProfilePasses passes, one
// call each, and a profiled serve is given that many calls.
const std::vector<std::string>& ProfileMetricNames();
inline constexpr int kProfilePasses = 12;

// The reply to a profiled serve: the metrics' values over the calls, or why
// there are none. It comes from the candidate's process, so it is advice for
// the model and never part of a verdict or a timing; a name outside
// ProfileMetricNames() or a value that is not finite makes it malformed.
struct ServeReply {
  std::vector<std::pair<std::string, double>> profile;
  std::string profile_error;
  nlohmann::json ToJson() const;
  static Result<ServeReply> Parse(const nlohmann::json& j, const std::string& what);
};

// ---- replies -------------------------------------------------------------

// {"ok": false, ...} for `status` (never OK) from `rank`.
nlohmann::json ErrorReply(const Status& status, int rank);
// Reads the common part of a reply: OK, or the worker's error as a Status of
// its kind (runtime_error / cancelled / harness), or kHarness if malformed.
Status ReplyStatus(const nlohmann::json& reply, const std::string& what);

}  // namespace kforge::eval::proto
