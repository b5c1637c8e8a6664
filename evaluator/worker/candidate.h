// The candidate worker: the untrusted process of one rank. It maps the arena
// its harness rank lent it, loads one candidate kernel, and runs it when told:
// once per correctness call (a request), or once per mailbox post in a timed
// run. It applies the sandbox to itself (sandbox/sandbox.h): the early layers
// at process start, seccomp once the arenas are mapped. Nothing it says is
// believed (protocol/messages.h).
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <optional>

#include "arena.h"
#include "collectives.h"
#include "context.h"
#include "kernel_module.h"
#include "profiler.h"
#include "protocol/channel.h"
#include "protocol/control_block.h"
#include "protocol/mailbox.h"
#include "sandbox/sandbox.h"
#include "worker_args.h"

namespace kforge::worker {

class CandidateWorker {
 public:
  // `early`: the report of the layers main() applied before anything else.
  CandidateWorker(const WorkerArgs& args, sandbox::Report early);
  ~CandidateWorker();
  int Run();

 private:
  using json = nlohmann::json;
  Status Hello();
  Result<json> Attach(const eval::Message& m, std::vector<int>* fds);
  Result<json> Configure(const eval::Message& m);
  Result<json> Calibrate(const eval::Message& m);
  Result<json> Load(const eval::Message& m);
  Result<json> Setup();
  Result<json> RunOnce(const eval::Message& m);
  Result<json> Serve(const eval::Message& m);
  Result<json> Teardown();
  Result<json> Detach();
  // One call on `set`: kf_run between two events, then a device-wide sync.
  // Returns the event time; a kernel error is a kRuntimeError.
  Result<double> Call(int set, bool null_kernel);

  WorkerArgs args_;
  sandbox::Report report_;
  eval::Channel channel_;
  eval::ControlBlock control_;
  eval::proto::Mailbox mailbox_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  ContextBase base_;
  PeerArenas arenas_;
  size_t readonly_bytes_ = 0;  // every arena's read-only part (0: shared through CUDA IPC)
  std::unique_ptr<CollectiveBackend> nccl_, emulated_;
  KernelModule kernel_;
  std::optional<ProblemView> view_;
  int sets_ = 1;
  uint64_t last_seq_ = 0;  // the last mailbox call answered
  bool sealed_ = false;    // seccomp applied
  // --profile: the range profiler, or why it could not start.
  std::unique_ptr<RangeProfiler> profiler_;
  std::string profiler_error_;
};

}  // namespace kforge::worker
