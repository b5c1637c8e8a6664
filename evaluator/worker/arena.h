// GPU memory shared between processes: an arena allocated by one process
// (always the trusted harness worker) and mapped by others, through CUDA IPC
// (read-write everywhere) or CUDA VMM (a read-only part for the others).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "vmm.h"

namespace kforge::worker {

// Zeroed device memory for other processes to map. Either one cudaMalloc with
// its IPC handle (hex), or (Split) two VMM allocations in one range, exported
// as descriptors: others map the first `readonly_bytes` read-only.
class DeviceArena {
 public:
  static Result<DeviceArena> Allocate(size_t bytes);
  // [0, readonly_bytes) and the rest, each rounded up to the device's
  // granularity; this process maps both read-write.
  static Result<DeviceArena> Split(int device, size_t readonly_bytes, size_t bytes);
  DeviceArena() = default;
  ~DeviceArena();
  DeviceArena(DeviceArena&& other) noexcept;
  DeviceArena& operator=(DeviceArena&& other) noexcept;

  char* base() const { return base_; }
  size_t bytes() const { return bytes_; }
  size_t readonly_bytes() const { return readonly_bytes_; }  // 0: CUDA IPC
  const std::string& handle() const { return handle_; }      // CUDA IPC only
  // CUDA VMM only: fresh descriptors of the read-only part and of the rest.
  Result<std::vector<int>> ExportFds() const;

 private:
  void Release();
  char* base_ = nullptr;
  size_t bytes_ = 0;
  size_t readonly_bytes_ = 0;
  std::string handle_;
  // CUDA VMM: the two parts and this process's mapping of them.
  std::unique_ptr<VmmAllocation> readonly_, writable_;
  std::unique_ptr<VmmMapping> mapping_;
};

// One rank's arena as another process learns it: a CUDA IPC handle, or the
// two descriptors of a split arena (closed by the caller after Open).
struct ArenaRef {
  std::string ipc_handle;  // hex; empty for a split arena
  size_t bytes = 0, readonly_bytes = 0;
  int readonly_fd = -1, writable_fd = -1;
};

// Every rank's arena as mapped in this process: opened from their IPC
// handles, except `own` (this process's arena, when it allocated it).
class PeerArenas {
 public:
  PeerArenas() = default;
  ~PeerArenas();
  PeerArenas(const PeerArenas&) = delete;
  PeerArenas& operator=(const PeerArenas&) = delete;

  // own_rank >= 0 with own_base: that rank is this process's own allocation.
  // A split arena's first part is mapped read-only.
  Status Open(const std::vector<ArenaRef>& arenas, int own_rank, char* own_base);
  Status Open(const std::vector<std::string>& ipc_handles, int own_rank, char* own_base);
  void Close();
  char* base(int rank) const { return bases_[static_cast<size_t>(rank)]; }
  bool open() const { return !bases_.empty(); }
  int world() const { return static_cast<int>(bases_.size()); }

 private:
  std::vector<char*> bases_;
  std::vector<bool> opened_;  // true where we called cudaIpcOpenMemHandle
  std::vector<VmmAllocation> imported_;
  std::vector<VmmMapping> mappings_;
};

}  // namespace kforge::worker
