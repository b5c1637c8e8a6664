// CUDA virtual memory management (VMM), for an arena that other processes
// map with less access than its owner: physical allocations exported as
// POSIX file descriptors, mapped into one reserved address range, each part
// with its own access (read-only or read-write) for this process's device.
//
// The driver's entry points come through the runtime
// (cudaGetDriverEntryPointByVersion), so the worker needs no link against
// libcuda and starts on machines without a driver like every other worker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::worker {

// Empty when this process's device can export VMM allocations as file
// descriptors; else why not (no VMM, no POSIX handles, an old driver).
std::string VmmUnsupportedReason(int device);

// The allocation granularity of `device` (bytes; every part's size and
// offset is a multiple of it).
Result<size_t> VmmGranularity(int device);

// One physical allocation on a device, owned (released on destruction).
class VmmAllocation {
 public:
  static Result<VmmAllocation> Create(int device, size_t bytes);
  // From a descriptor another process exported (the descriptor stays the caller's).
  static Result<VmmAllocation> Import(int fd, size_t bytes);
  VmmAllocation() = default;
  ~VmmAllocation();
  VmmAllocation(VmmAllocation&& o) noexcept;
  VmmAllocation& operator=(VmmAllocation&& o) noexcept;

  size_t bytes() const { return bytes_; }
  uint64_t handle() const { return handle_; }
  // A fresh descriptor for another process (the caller closes it).
  Result<int> Export() const;

 private:
  void Release();
  uint64_t handle_ = 0;  // CUmemGenericAllocationHandle
  size_t bytes_ = 0;
};

// How a part of a mapping may be accessed from this process's device.
enum class Access { kReadOnly, kReadWrite };

// Allocations mapped back to back into one reserved range: part i at the sum
// of the sizes before it. Unmapped and unreserved on destruction (the
// allocations themselves belong to their owners).
class VmmMapping {
 public:
  struct Part {
    const VmmAllocation* allocation;
    Access access;
  };
  static Result<VmmMapping> Map(int device, const std::vector<Part>& parts);
  VmmMapping() = default;
  ~VmmMapping();
  VmmMapping(VmmMapping&& o) noexcept;
  VmmMapping& operator=(VmmMapping&& o) noexcept;

  char* base() const { return reinterpret_cast<char*>(base_); }
  size_t bytes() const { return bytes_; }

 private:
  void Release();
  uint64_t base_ = 0;  // CUdeviceptr
  size_t bytes_ = 0;
  std::vector<size_t> mapped_;  // the sizes of the parts mapped so far, in order
};

}  // namespace kforge::worker
