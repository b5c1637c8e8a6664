// The harness worker: the trusted process of one rank. It owns the rank's GPU
// memory (a private arena the candidate never sees, and the candidate arena it
// lends the candidate worker: its inputs read-only through CUDA VMM where the
// device allows, else all of it through CUDA IPC), generates inputs, runs the
// baseline (the task's reference, trusted code), poisons and verifies the
// candidate's outputs, and keeps the clock of every timed call. It never loads
// a candidate's code (protocol/messages.h).
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <optional>
#include <vector>

#include "arena.h"
#include "collectives.h"
#include "context.h"
#include "device_ops.h"
#include "kernel_module.h"
#include "protocol/channel.h"
#include "protocol/control_block.h"
#include "protocol/mailbox.h"
#include "protocol/messages.h"
#include "worker_args.h"

namespace kforge::worker {

class HarnessWorker {
 public:
  explicit HarnessWorker(const WorkerArgs& args);
  ~HarnessWorker();
  int Run();  // the request loop; returns the exit code

 private:
  using json = nlohmann::json;
  Status Hello();
  // harness.cc: memory, problems, the baseline
  Result<json> NcclInit(const eval::Message& m);
  Result<json> Alloc(const eval::Message& m, std::vector<int>* fds);
  Result<json> Peers(const eval::Message& m);
  Result<json> Configure(const eval::Message& m);
  Result<json> LoadBaseline(const eval::Message& m);
  Result<json> Setup();
  Result<json> Teardown();
  Result<json> Free();
  Result<json> Health();
  // harness_data.cc: inputs, expected outputs, poison, verification
  Result<json> Inputs(const eval::Message& m);
  // Fresh inputs into the private arena (the pristine copies), and into the
  // candidate's arena too when `to_candidate` (correctness calls; timed
  // calls get theirs from StageCall, just before the call).
  Status MakeInputs(const std::vector<eval::proto::SetSeed>& seeds, bool to_candidate);
  // `inout`: the in-place inputs too (else only those the kernel may not write).
  Status CopyInputsToCandidate(int set, bool inout);
  // A timed call's set, just before the call: its inputs into the candidate's
  // arena, its outputs poisoned, and L2 flushed.
  Status StageCall(int set, uint32_t poison);
  Result<json> BaselineRun(const eval::Message& m);
  Status RunBaseline(const std::vector<int>& sets);
  Result<json> Poison(const eval::Message& m);
  Status PoisonSets(const std::vector<int>& sets, uint32_t pattern);
  Result<json> ReadOutputs(const eval::Message& m, std::vector<int>* fds);
  Result<json> Verify(const eval::Message& m);
  Status VerifySet(int set, int tag, uint32_t poison, std::vector<eval::proto::Failure>* failures,
                   std::vector<std::pair<int, std::string>>* changed);
  // harness_timing.cc: calibrating the mailbox path, driving a served group
  Result<json> Drive(const eval::Message& m);
  Result<json> Calibrate(const eval::Message& m);
  Result<eval::proto::Mailbox> MailboxFrom(const eval::Message& m);

  // Device results of one VerifySet; host explanations of the first few failures only.
  static constexpr size_t kMaxChecks = 2 * KF_MAX_TENSORS + 2;
  static constexpr size_t kMaxExplained = 4;
  bool configured() const { return view_.has_value(); }
  char* Private(size_t off) const { return private_.base() + off; }
  char* Candidate(size_t off) const { return candidate_.base() + off; }
  kf_ctx BaselineContext(int set) const;
  Status RestoreInout(bool candidate, int set);

  WorkerArgs args_;
  eval::Channel channel_;
  eval::ControlBlock control_;
  cudaStream_t stream_ = nullptr;
  ContextBase base_;
  std::unique_ptr<CollectiveBackend> nccl_;      // real GPUs: the harness group's NCCL
  std::unique_ptr<CollectiveBackend> emulated_;  // shared GPUs: rebuilt per problem
  KernelModule baseline_;
  DeviceArena private_, candidate_;
  PeerArenas private_peers_;         // every rank's private arena (the baseline's peers)
  std::optional<ProblemView> view_;  // the configured problem, private layout
  eval::proto::ArenaLayout candidate_layout_;
  int sets_ = 1;
  // Per output, the RMS bound against the baseline's outputs (configure's
  // rms_vs_baseline); empty: eval::AgainstBaseline without a measurement.
  std::vector<double> rms_vs_baseline_;
  DeviceCheck* check_ = nullptr;  // device scratch for the checks: kMaxChecks entries
  // Read before every timed call to evict the staged data from L2: as many
  // bytes as L2 holds, shared out among the ranks of one GPU (zeros;
  // check_sink_ is 4 bytes).
  void* flush_ = nullptr;
  size_t flush_bytes_ = 0;
  uint32_t* check_sink_ = nullptr;
  uint32_t last_poison_ = 0xFFFFFFFFu;
  // Whether this device can give the candidate read-only inputs (CUDA VMM),
  // asked at the first split arena: empty when it can, else why not.
  std::optional<std::string> vmm_refused_;
};

}  // namespace kforge::worker
