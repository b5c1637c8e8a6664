// WorkerGroup: the coordinator's handle on one rank group — W kforge-worker
// processes of one role (harness or candidate, protocol/messages.h), spawned
// with a scrubbed environment before any CUDA call, one socket each, and a
// shared control block. Every exchange has a deadline; a rank that misses it
// is named, and the whole group is killed (a spinning kernel only ends when
// its process dies, and peers spinning on it must die too).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "protocol/channel.h"
#include "protocol/control_block.h"
#include "run/canary.h"
#include "run/output_drain.h"

namespace kforge::eval {

struct GroupOptions {
  std::filesystem::path worker_path;
  std::string role = "harness";  // "harness" | "candidate"
  std::vector<int> mailbox_fds;  // candidate: rank r's mailbox (fd 5 in the worker)
  std::string candidate_dir;     // candidate: where its kernel is
  std::string mps_dir;           // the MPS pipe directory, if any
  bool candidate_nccl = false;   // candidate: it will start NCCL
  bool profile_rank0 = false;    // candidate: rank 0 loads the range profiler (--profile)
  int world = 1;
  std::vector<int> devices;                // device of each rank
  bool emulated = false;                   // ranks share GPUs: built-in collectives
  std::map<std::string, std::string> env;  // extra environment (the rest is scrubbed)
  double start_deadline_s = 60;
  // Each rank's stdout and stderr go to the coordinator through a pipe, kept
  // bounded (output_drain.h) and never copied to its own output; otherwise
  // they are the coordinator's (the trusted harness).
  bool capture_output = false;
  // Harness role only (a candidate group with one is refused): the
  // evaluation's canary (EvalOptions::canary), planted in each rank's
  // environment as kEvalCanaryEnv and in a 0600 file of a private directory
  // the group owns (canary_file(); run/canary.h). Empty: none.
  std::string canary;
};

// What went wrong in the last failed exchange, for the result document.
struct GroupFailure {
  std::string phase;
  std::vector<int> hung_ranks;  // no reply before the deadline
  int rank = -1;                // the rank whose error is reported (the first to report)
  std::string message;
  ErrorKind kind = ErrorKind::kOk;
  double deadline_s = 0;
  std::vector<int>
      failed_ranks;  // every rank that reported an error (under MPS a fault reaches all)
};

class WorkerGroup {
 public:
  // Spawns the ranks and waits for each one's hello (its CUDA context made).
  // A start refused because the GPU's MPS server is not ready yet (it is
  // replaced after a client's fatal fault, and new clients get
  // cudaErrorMpsServerNotReady meanwhile) is tried again after 0.2, 0.4, 0.8
  // and 1.6 s; any other failure is returned at once.
  static Result<std::unique_ptr<WorkerGroup>> Start(const GroupOptions& options);
  ~WorkerGroup();

  // Sends `msg` to every rank and waits for every reply. On any failure the
  // group is dead afterwards (killed), last_failure() says why, and the Status
  // kind is kDeadlock (deadline), kRuntimeError (a kernel/CUDA error or a
  // crash) or kHarness.
  Result<std::vector<Message>> All(const nlohmann::json& msg, double deadline_s,
                                   const std::string& phase);
  // Per-rank messages.
  Result<std::vector<Message>> Each(const std::vector<nlohmann::json>& msgs, double deadline_s,
                                    const std::string& phase);
  // With descriptors for each rank (not taken: the caller closes them).
  Result<std::vector<Message>> Each(const std::vector<nlohmann::json>& msgs,
                                    const std::vector<std::vector<int>>& fds, double deadline_s,
                                    const std::string& phase);
  // Sends without waiting; Collect waits for the replies of the last Post.
  Status Post(const std::vector<nlohmann::json>& msgs, const std::vector<std::vector<int>>& fds,
              const std::string& phase);
  Result<std::vector<Message>> Collect(double deadline_s, const std::string& phase);
  // The same, while these ranks drive `watched` (the served group whose
  // calls they time through its mailboxes): when `watched` stops serving
  // (StoppedServing: a process exits, by a crash, an abort or a kill by the
  // sandbox, or a rank reports its kernel's error), the wait ends within
  // milliseconds instead of at the deadline, since the drive's next call can
  // no longer be answered. This group is then killed (its ranks may be left
  // mid-drive, waiting on a dead peer's mailbox or in a barrier) and the
  // status is kCancelled; `watched` is left as it is, for JudgeFailedDrive
  // to say which rank stopped and why. Whose failure that is depends on who
  // runs in `watched`: the caller's decision.
  Result<std::vector<Message>> Collect(double deadline_s, const std::string& phase,
                                       WorkerGroup* watched);
  Result<std::vector<Message>> Each(const std::vector<nlohmann::json>& msgs,
                                    const std::vector<std::vector<int>>& fds, double deadline_s,
                                    const std::string& phase, WorkerGroup* watched);
  // The lowest rank whose process has exited, without reaping it (how it
  // ended stays for FailExited); -1 while every rank's process lives.
  int ExitedRank() const;
  // Non-blocking: the lowest rank that can no longer serve a drive (its
  // process exited, or it replied with an error before the drive was over),
  // or -1. A reply read here is kept for the next Collect.
  int StoppedServing();
  // When a rank's process has exited: the group is killed, last_failure()
  // names that rank and how it ended ("crashed (signal 11, ...)"), and the
  // status is kRuntimeError. Ok (and nothing done) while every rank lives.
  Status FailExited(const std::string& phase);
  // Raises the group's abort flag (its ranks' waits end with kCancelled).
  void Abort();
  const std::vector<pid_t>& pids() const { return pids_; }

  const GroupOptions& options() const { return options_; }
  const std::vector<nlohmann::json>& hellos() const { return hellos_; }
  const GroupFailure& last_failure() const { return failure_; }
  bool alive() const { return alive_; }
  void Kill();
  // What the ranks wrote to stdout and stderr (capture_output), printable,
  // head and tail of each: OutputDrain::ToJson. Complete once the group is dead.
  nlohmann::json CapturedOutput() const;
  // capture_output: from now on, the ranks' output is searched for
  // `needles` (OutputDrain::Watch); OutputSighting says where one was first
  // seen (complete once the group is dead).
  void WatchOutput(const std::vector<std::string>& needles);
  std::optional<std::pair<int, CanarySighting>> OutputSighting() const;
  // The canary's file (GroupOptions::canary), or empty without one.
  std::filesystem::path canary_file() const {
    return canary_file_ ? canary_file_->path() : std::filesystem::path();
  }

 private:
  static Result<std::unique_ptr<WorkerGroup>> StartOnce(const GroupOptions& options);
  WorkerGroup() = default;
  Status Fail(GroupFailure f);
  // Rank r's next reply: one StoppedServing read first, else the channel's.
  Result<Message> Next(int r, std::chrono::milliseconds timeout);

  GroupOptions options_;
  std::unique_ptr<OutputDrain> output_;      // capture_output only
  std::unique_ptr<CanaryFile> canary_file_;  // GroupOptions::canary only; removed with the group
  std::vector<pid_t> pids_;
  std::vector<Channel> channels_;
  ControlBlock control_;
  std::vector<nlohmann::json> hellos_;
  std::vector<std::optional<Message>> early_;  // [rank], read by StoppedServing
  GroupFailure failure_;
  bool alive_ = false;
};

// After a drive of `served` failed with `driven` (from Each/Collect with
// `served` watched; the driving group is dead): whose failure it is, so that
// a served process's death is never reported as anything else. A process of
// `served` that exited is its runtime error, naming the rank and how it
// ended, whatever the driving group said; else an error `served` reports
// (already, as StoppedServing read it, or within a second) is its own.
// Otherwise `driven` stands (a timeout: the served group did not answer a
// call). `served` is killed either way.
struct DriveFailure {
  Status status;
  bool served_failed = false;  // status is served's own (served.last_failure() says more)
};
DriveFailure JudgeFailedDrive(WorkerGroup& served, const Status& driven, const std::string& phase);

// The environment rank processes of `o` are spawned with: the scrubbed
// coordinator's (sandbox::ScrubbedEnvironment) with `o.env`, NVLink
// multicast off, and, for a harness group only, its canary. A candidate
// group's never holds kEvalCanaryEnv, whatever `o.env` says.
std::vector<std::string> WorkerEnvironment(const GroupOptions& o);

// The MPS control daemon's environment: kforge's, without what must not
// outlive an evaluation in a process of this user (credentials, the
// canaries: the daemon and the MPS server it starts are ordinary, dumpable
// processes, whose /proc/<pid>/environ only Landlock keeps from a
// candidate), plus `mps_env` (MpsDaemon::Env).
std::map<std::string, std::string> MpsDaemonEnvironment(
    const std::map<std::string, std::string>& mps_env);

// Starts a private MPS control daemon (so several rank processes on one GPU
// run concurrently and cross-process spin barriers take microseconds, not
// time slices) and stops it on destruction. Unavailable: returns nullptr.
class MpsDaemon {
 public:
  static std::unique_ptr<MpsDaemon> StartIfAvailable();
  ~MpsDaemon();
  // Environment the clients need.
  std::map<std::string, std::string> Env() const;

 private:
  std::filesystem::path dir_;
};

}  // namespace kforge::eval
