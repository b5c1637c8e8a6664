// Worker: one process per rank. It owns the rank's CUDA context, its slice of
// the symmetric memory, the loaded kernels (baseline and candidate) and the
// harness collectives backend, and obeys the coordinator's messages. The
// untrusted kernel runs here, never in the coordinator.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "collectives.h"
#include "kforge/evaluator/task.h"
#include "kforge/kernel.h"
#include "protocol/channel.h"
#include "protocol/control_block.h"

namespace kforge::worker {

struct WorkerArgs {
  int channel_fd = -1;
  int control_fd = -1;
  int rank = 0;
  int world = 1;
  int device = 0;
  bool emulated = false;
};

using KernelFn = int (*)(kf_ctx*);

struct KernelSlot {
  std::string path;
  void* handle = nullptr;
  KernelFn setup = nullptr, run = nullptr, teardown = nullptr;
  kf_ctx ctx{};
  bool set_up = false;
};

// Byte offsets (identical on every rank) of everything in the rank's one
// symmetric allocation.
struct Layout {
  int sets = 1;
  std::vector<std::vector<size_t>> input_off;   // [set][input]
  std::vector<std::vector<size_t>> output_off;  // [set][output]
  size_t workspace_off[2] = {0, 0}, pad_off[2] = {0, 0};
  size_t workspace_bytes = 0, pad_bytes = 0;
  size_t staging_off = 0, staging_bytes = 0;
  size_t total = 0;
};

class Worker {
 public:
  explicit Worker(const WorkerArgs& args);
  ~Worker();
  // Runs the message loop until "exit" or a fatal error. Returns the exit code.
  int Run();

 private:
  Result<nlohmann::json> Dispatch(const eval::Message& msg);
  Status Hello();
  Result<nlohmann::json> HandleNcclInit(const nlohmann::json& m);
  Result<nlohmann::json> HandleLoad(const nlohmann::json& m);
  Result<nlohmann::json> HandleUnload(const nlohmann::json& m);
  Result<nlohmann::json> HandleAlloc(const nlohmann::json& m);
  Result<nlohmann::json> HandlePeers(const nlohmann::json& m);
  Result<nlohmann::json> HandleFree();
  Result<nlohmann::json> HandleSetup(const nlohmann::json& m);
  Result<nlohmann::json> HandleTeardown(const nlohmann::json& m);
  Result<nlohmann::json> HandleInputs(const nlohmann::json& m);
  Result<nlohmann::json> HandleRun(const nlohmann::json& m, std::vector<int>* fds);
  Result<nlohmann::json> HandleTime(const nlohmann::json& m);
  Result<nlohmann::json> HandleRevalidate(const nlohmann::json& m);

  Result<KernelSlot*> Slot(const nlohmann::json& m);
  int SlotIndex(const std::string& name) const { return name == "baseline" ? 0 : 1; }
  // The kernel's view for input/output set `set`.
  kf_ctx ContextFor(const KernelSlot& slot, int slot_index, int set) const;
  char* Local(size_t off) const { return static_cast<char*>(base_) + off; }
  void* Peer(int r, size_t off) const { return static_cast<char*>(peer_base_[r]) + off; }
  Status PoisonOutputs(int set);
  Status CallRun(KernelSlot& slot, int slot_index, int set, const char* phase);
  Status CheckInputsUnchanged(int set, std::vector<std::string>* changed);
  Result<std::vector<std::vector<char>>> CopyOutputs(int set);
  Result<nlohmann::json> CompareWithReference(const std::vector<std::vector<char>>& got);
  void ReleaseMemory();

  WorkerArgs args_;
  bool trace_ = false;  // KFORGE_WORKER_TRACE: one stderr line per message
  eval::Channel channel_;
  eval::ControlBlock control_;
  cudaStream_t stream_ = nullptr;
  kf_gpu_info gpu_{};
  std::unique_ptr<CollectiveBackend> backend_;
  std::map<std::string, KernelSlot> slots_;

  std::map<std::string, eval::Task> tasks_;  // by directory
  std::optional<eval::Problem> problem_;
  Layout layout_;
  void* base_ = nullptr;
  std::vector<void*> peer_base_;
  std::vector<std::vector<char>> host_inputs_;  // this rank's inputs of the current trial
  std::vector<std::vector<char>> reference_;    // baseline outputs of the current trial
};

// Prints the hardware card (JSON) of the given devices; used by --probe.
nlohmann::json ProbeDevices(const std::vector<int>& devices);
// Fills kf_gpu_info for one device.
Status QueryGpuInfo(int device, kf_gpu_info* info);

}  // namespace kforge::worker
