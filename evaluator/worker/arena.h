// GPU memory shared between processes: an arena allocated by one process
// (always the trusted harness worker) and mapped by others through CUDA IPC.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::worker {

// One cudaMalloc, zeroed, with its IPC handle (hex).
class DeviceArena {
 public:
  static Result<DeviceArena> Allocate(size_t bytes);
  DeviceArena() = default;
  ~DeviceArena();
  DeviceArena(DeviceArena&& other) noexcept;
  DeviceArena& operator=(DeviceArena&& other) noexcept;

  char* base() const { return base_; }
  size_t bytes() const { return bytes_; }
  const std::string& handle() const { return handle_; }

 private:
  void Release();
  char* base_ = nullptr;
  size_t bytes_ = 0;
  std::string handle_;
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
  Status Open(const std::vector<std::string>& handles, int own_rank, char* own_base);
  void Close();
  char* base(int rank) const { return bases_[static_cast<size_t>(rank)]; }
  bool open() const { return !bases_.empty(); }
  int world() const { return static_cast<int>(bases_.size()); }

 private:
  std::vector<char*> bases_;
  std::vector<bool> opened_;  // true where we called cudaIpcOpenMemHandle
};

}  // namespace kforge::worker
