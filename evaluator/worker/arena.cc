#include "arena.h"

#include <cuda_runtime.h>

#include "cuda_check.h"
#include "kforge/core/hash.h"

namespace kforge::worker {

Result<DeviceArena> DeviceArena::Allocate(size_t bytes) {
  DeviceArena a;
  a.bytes_ = std::max<size_t>(bytes, 256);
  void* p = nullptr;
  KF_CUDA(cudaMalloc(&p, a.bytes_));
  a.base_ = static_cast<char*>(p);
  // Never hand a kernel memory holding a previous kernel's data.
  KF_CUDA(cudaMemset(a.base_, 0, a.bytes_));
  cudaIpcMemHandle_t h;
  KF_CUDA(cudaIpcGetMemHandle(&h, a.base_));
  a.handle_ = HexEncode(&h, sizeof(h));
  return a;
}

DeviceArena::~DeviceArena() { Release(); }

void DeviceArena::Release() {
  if (base_ != nullptr) {
    cudaDeviceSynchronize();
    cudaFree(base_);
    base_ = nullptr;
    bytes_ = 0;
  }
  handle_.clear();
}

DeviceArena::DeviceArena(DeviceArena&& o) noexcept
    : base_(o.base_), bytes_(o.bytes_), handle_(std::move(o.handle_)) {
  o.base_ = nullptr;
}

DeviceArena& DeviceArena::operator=(DeviceArena&& o) noexcept {
  if (this != &o) {
    Release();
    base_ = o.base_;
    bytes_ = o.bytes_;
    handle_ = std::move(o.handle_);
    o.base_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

PeerArenas::~PeerArenas() { Close(); }

Status PeerArenas::Open(const std::vector<std::string>& handles, int own_rank, char* own_base) {
  Close();
  bases_.assign(handles.size(), nullptr);
  opened_.assign(handles.size(), false);
  for (size_t r = 0; r < handles.size(); ++r) {
    if (static_cast<int>(r) == own_rank && own_base != nullptr) {
      bases_[r] = own_base;
      continue;
    }
    cudaIpcMemHandle_t h;
    KF_RETURN_IF_ERROR(HexDecode(handles[r], &h, sizeof(h)));
    void* p = nullptr;
    KF_CUDA(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    bases_[r] = static_cast<char*>(p);
    opened_[r] = true;
  }
  return Status::Ok();
}

void PeerArenas::Close() {
  for (size_t r = 0; r < bases_.size(); ++r) {
    if (opened_[r] && bases_[r] != nullptr) cudaIpcCloseMemHandle(bases_[r]);
  }
  bases_.clear();
  opened_.clear();
}

}  // namespace kforge::worker
