#include "vmm.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <mutex>
#include <type_traits>
#include <utility>

namespace kforge::worker {
namespace {

// The driver entry points VMM needs, fetched once.
struct Driver {
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 free = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  PFN_cuMemExportToShareableHandle_v10020 export_handle = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 import_handle = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuDeviceGetAttribute_v2000 attribute = nullptr;
  PFN_cuGetErrorName_v6000 error_name = nullptr;
  std::string missing;  // the first entry point the driver lacks
};

const Driver& GetDriver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    auto get = [](const char* name, auto* fn) {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult q{};
      if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
          q != cudaDriverEntryPointSuccess || p == nullptr) {
        (void)cudaGetLastError();
        if (d.missing.empty()) d.missing = name;
        return;
      }
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(p);
    };
    get("cuMemCreate", &d.create);
    get("cuMemRelease", &d.release);
    get("cuMemAddressReserve", &d.reserve);
    get("cuMemAddressFree", &d.free);
    get("cuMemMap", &d.map);
    get("cuMemUnmap", &d.unmap);
    get("cuMemSetAccess", &d.set_access);
    get("cuMemExportToShareableHandle", &d.export_handle);
    get("cuMemImportFromShareableHandle", &d.import_handle);
    get("cuMemGetAllocationGranularity", &d.granularity);
    get("cuDeviceGetAttribute", &d.attribute);
    get("cuGetErrorName", &d.error_name);
  });
  return d;
}

Status Check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return Status::Ok();
  const char* name = nullptr;
  if (GetDriver().error_name == nullptr || GetDriver().error_name(r, &name) != CUDA_SUCCESS) {
    name = nullptr;
  }
  return Error(ErrorKind::kRuntimeError,
               std::string(what) + ": CUDA error " + (name != nullptr ? name : std::to_string(r)));
}

#define KF_CU(call) KF_RETURN_IF_ERROR(Check((call), #call))

Result<const Driver*> Usable() {
  const Driver& d = GetDriver();
  if (!d.missing.empty()) {
    return Error(ErrorKind::kRuntimeError, "the CUDA driver lacks " + d.missing);
  }
  return &d;
}

CUmemAllocationProp Prop(int device) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return p;
}

}  // namespace

std::string VmmUnsupportedReason(int device) {
  auto d = Usable();
  if (!d.ok()) return d.status().message();
  // The runtime's device ordinal: make sure its context (and the driver) is up.
  if (cudaFree(nullptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return "no CUDA context";
  }
  int vmm = 0, fd = 0;
  if ((*d)->attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device) !=
          CUDA_SUCCESS ||
      vmm == 0) {
    return "the device does not support CUDA virtual memory management";
  }
  if ((*d)->attribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                      device) != CUDA_SUCCESS ||
      fd == 0) {
    return "the device cannot export memory as POSIX file descriptors";
  }
  return "";
}

Result<size_t> VmmGranularity(int device) {
  KF_ASSIGN_OR_RETURN(const Driver* d, Usable());
  CUmemAllocationProp p = Prop(device);
  size_t g = 0;
  KF_CU(d->granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  if (g == 0) return Error(ErrorKind::kRuntimeError, "the CUDA driver gave a zero granularity");
  return g;
}

Result<VmmAllocation> VmmAllocation::Create(int device, size_t bytes) {
  KF_ASSIGN_OR_RETURN(const Driver* d, Usable());
  CUmemAllocationProp p = Prop(device);
  VmmAllocation a;
  CUmemGenericAllocationHandle h = 0;
  KF_CU(d->create(&h, bytes, &p, 0));
  a.handle_ = h;
  a.bytes_ = bytes;
  return a;
}

Result<VmmAllocation> VmmAllocation::Import(int fd, size_t bytes) {
  KF_ASSIGN_OR_RETURN(const Driver* d, Usable());
  VmmAllocation a;
  CUmemGenericAllocationHandle h = 0;
  KF_CU(d->import_handle(&h, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  a.handle_ = h;
  a.bytes_ = bytes;
  return a;
}

Result<int> VmmAllocation::Export() const {
  KF_ASSIGN_OR_RETURN(const Driver* d, Usable());
  int fd = -1;
  KF_CU(d->export_handle(&fd, handle_, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  return fd;
}

VmmAllocation::~VmmAllocation() { Release(); }

void VmmAllocation::Release() {
  if (handle_ != 0) (void)GetDriver().release(handle_);
  handle_ = 0;
  bytes_ = 0;
}

VmmAllocation::VmmAllocation(VmmAllocation&& o) noexcept
    : handle_(std::exchange(o.handle_, 0)), bytes_(std::exchange(o.bytes_, 0)) {}

VmmAllocation& VmmAllocation::operator=(VmmAllocation&& o) noexcept {
  if (this != &o) {
    Release();
    handle_ = std::exchange(o.handle_, 0);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

Result<VmmMapping> VmmMapping::Map(int device, const std::vector<Part>& parts) {
  KF_ASSIGN_OR_RETURN(const Driver* d, Usable());
  VmmMapping m;
  for (const Part& p : parts) m.bytes_ += p.allocation->bytes();
  KF_ASSIGN_OR_RETURN(size_t granularity, VmmGranularity(device));
  CUdeviceptr base = 0;
  KF_CU(d->reserve(&base, m.bytes_, granularity, 0, 0));
  m.base_ = base;
  CUdeviceptr at = base;
  for (const Part& p : parts) {
    KF_CU(d->map(at, p.allocation->bytes(), 0, p.allocation->handle(), 0));
    m.mapped_.push_back(p.allocation->bytes());
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = p.access == Access::kReadOnly ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                                 : CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    KF_CU(d->set_access(at, p.allocation->bytes(), &access, 1));
    at += p.allocation->bytes();
  }
  return m;
}

VmmMapping::~VmmMapping() { Release(); }

void VmmMapping::Release() {
  if (base_ != 0) {
    // Work still queued on the range must finish before it goes away.
    (void)cudaDeviceSynchronize();
    CUdeviceptr at = base_;
    for (size_t part : mapped_) {
      (void)GetDriver().unmap(at, part);
      at += part;
    }
    (void)GetDriver().free(base_, bytes_);
  }
  base_ = 0;
  bytes_ = 0;
  mapped_.clear();
}

VmmMapping::VmmMapping(VmmMapping&& o) noexcept
    : base_(std::exchange(o.base_, 0)),
      bytes_(std::exchange(o.bytes_, 0)),
      mapped_(std::move(o.mapped_)) {
  o.mapped_.clear();
}

VmmMapping& VmmMapping::operator=(VmmMapping&& o) noexcept {
  if (this != &o) {
    Release();
    base_ = std::exchange(o.base_, 0);
    bytes_ = std::exchange(o.bytes_, 0);
    mapped_ = std::move(o.mapped_);
    o.mapped_.clear();
  }
  return *this;
}

}  // namespace kforge::worker
