#include "arena.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <utility>

#include "cuda_check.h"
#include "kforge/core/hash.h"

namespace kforge::worker {
namespace {

size_t RoundUp(size_t x, size_t g) { return (x + g - 1) / g * g; }

}  // namespace

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

Result<DeviceArena> DeviceArena::Split(int device, size_t readonly_bytes, size_t bytes) {
  KF_ASSIGN_OR_RETURN(size_t g, VmmGranularity(device));
  const size_t ro = RoundUp(std::max<size_t>(readonly_bytes, 1), g);
  const size_t rw =
      RoundUp(std::max<size_t>(bytes > readonly_bytes ? bytes - readonly_bytes : 1, 1), g);
  DeviceArena a;
  KF_ASSIGN_OR_RETURN(VmmAllocation r, VmmAllocation::Create(device, ro));
  KF_ASSIGN_OR_RETURN(VmmAllocation w, VmmAllocation::Create(device, rw));
  a.readonly_ = std::make_unique<VmmAllocation>(std::move(r));
  a.writable_ = std::make_unique<VmmAllocation>(std::move(w));
  KF_ASSIGN_OR_RETURN(VmmMapping m,
                      VmmMapping::Map(device, {{a.readonly_.get(), Access::kReadWrite},
                                               {a.writable_.get(), Access::kReadWrite}}));
  a.mapping_ = std::make_unique<VmmMapping>(std::move(m));
  a.base_ = a.mapping_->base();
  a.bytes_ = ro + rw;
  a.readonly_bytes_ = ro;
  KF_CUDA(cudaMemset(a.base_, 0, a.bytes_));
  return a;
}

Result<std::vector<int>> DeviceArena::ExportFds() const {
  if (readonly_ == nullptr)
    return Error(ErrorKind::kHarness, "a CUDA IPC arena has no descriptors");
  KF_ASSIGN_OR_RETURN(int ro, readonly_->Export());
  auto rw = writable_->Export();
  if (!rw.ok()) {
    close(ro);
    return rw.status();
  }
  return std::vector<int>{ro, *rw};
}

DeviceArena::~DeviceArena() { Release(); }

void DeviceArena::Release() {
  if (mapping_ != nullptr) {
    mapping_.reset();  // synchronises, unmaps
    readonly_.reset();
    writable_.reset();
  } else if (base_ != nullptr) {
    cudaDeviceSynchronize();
    cudaFree(base_);
  }
  base_ = nullptr;
  bytes_ = 0;
  readonly_bytes_ = 0;
  handle_.clear();
}

DeviceArena::DeviceArena(DeviceArena&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      readonly_bytes_(std::exchange(o.readonly_bytes_, 0)),
      handle_(std::move(o.handle_)),
      readonly_(std::move(o.readonly_)),
      writable_(std::move(o.writable_)),
      mapping_(std::move(o.mapping_)) {}

DeviceArena& DeviceArena::operator=(DeviceArena&& o) noexcept {
  if (this != &o) {
    Release();
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    readonly_bytes_ = std::exchange(o.readonly_bytes_, 0);
    handle_ = std::move(o.handle_);
    readonly_ = std::move(o.readonly_);
    writable_ = std::move(o.writable_);
    mapping_ = std::move(o.mapping_);
  }
  return *this;
}

PeerArenas::~PeerArenas() { Close(); }

Status PeerArenas::Open(const std::vector<std::string>& ipc_handles, int own_rank, char* own_base) {
  std::vector<ArenaRef> refs(ipc_handles.size());
  for (size_t r = 0; r < refs.size(); ++r) refs[r].ipc_handle = ipc_handles[r];
  return Open(refs, own_rank, own_base);
}

Status PeerArenas::Open(const std::vector<ArenaRef>& arenas, int own_rank, char* own_base) {
  Close();
  bases_.assign(arenas.size(), nullptr);
  opened_.assign(arenas.size(), false);
  int device = 0;
  KF_CUDA(cudaGetDevice(&device));
  for (size_t r = 0; r < arenas.size(); ++r) {
    const ArenaRef& a = arenas[r];
    if (static_cast<int>(r) == own_rank && own_base != nullptr) {
      bases_[r] = own_base;
      continue;
    }
    if (a.ipc_handle.empty()) {
      if (a.readonly_fd < 0 || a.writable_fd < 0 || a.readonly_bytes == 0 ||
          a.bytes <= a.readonly_bytes) {
        return Error(ErrorKind::kHarness, "rank " + std::to_string(r) +
                                              "'s arena has neither an IPC handle nor descriptors");
      }
      KF_ASSIGN_OR_RETURN(VmmAllocation ro, VmmAllocation::Import(a.readonly_fd, a.readonly_bytes));
      KF_ASSIGN_OR_RETURN(VmmAllocation rw,
                          VmmAllocation::Import(a.writable_fd, a.bytes - a.readonly_bytes));
      imported_.push_back(std::move(ro));
      imported_.push_back(std::move(rw));
      const size_t n = imported_.size();
      KF_ASSIGN_OR_RETURN(VmmMapping m,
                          VmmMapping::Map(device, {{&imported_[n - 2], Access::kReadOnly},
                                                   {&imported_[n - 1], Access::kReadWrite}}));
      bases_[r] = m.base();
      mappings_.push_back(std::move(m));
      continue;
    }
    cudaIpcMemHandle_t h;
    KF_RETURN_IF_ERROR(HexDecode(a.ipc_handle, &h, sizeof(h)));
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
  mappings_.clear();  // before the allocations they map
  imported_.clear();
  bases_.clear();
  opened_.clear();
}

}  // namespace kforge::worker
