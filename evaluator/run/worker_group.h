// WorkerGroup: the coordinator's handle on one rank group — W kforge-worker
// processes forked and exec'd before any CUDA call, one socket each, and a
// shared control block. Every exchange has a deadline; a rank that misses it
// is named, and the whole group is killed (a spinning kernel only ends when
// its process dies, and peers spinning on it must die too).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "protocol/channel.h"
#include "protocol/control_block.h"

namespace kforge::eval {

struct GroupOptions {
  std::filesystem::path worker_path;
  int world = 1;
  std::vector<int> devices;                // device of each rank
  bool emulated = false;                   // ranks share GPUs: built-in collectives
  std::map<std::string, std::string> env;  // extra environment for the workers
  double start_deadline_s = 60;
};

// What went wrong in the last failed exchange, for the result document.
struct GroupFailure {
  std::string phase;
  std::vector<int> hung_ranks;  // no reply before the deadline
  int rank = -1;                // the rank whose error is reported
  std::string message;
  ErrorKind kind = ErrorKind::kOk;
  double deadline_s = 0;
};

class WorkerGroup {
 public:
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

  const GroupOptions& options() const { return options_; }
  const std::vector<nlohmann::json>& hellos() const { return hellos_; }
  const GroupFailure& last_failure() const { return failure_; }
  bool alive() const { return alive_; }
  void Kill();

 private:
  WorkerGroup() = default;
  Status Fail(GroupFailure f);

  GroupOptions options_;
  std::vector<pid_t> pids_;
  std::vector<Channel> channels_;
  ControlBlock control_;
  std::vector<nlohmann::json> hellos_;
  GroupFailure failure_;
  bool alive_ = false;
};

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
