// Exploit: the harness maps a kernel's inputs read-only (CUDA VMM), so a
// store to one faults. Take the allocation's handle back from the input's
// address and map it again read-write, or lift the existing mapping's
// protection in place; either way the inputs become scratch space the kernel
// could use and restore before it returns. A kernel links no driver library,
// and where a task's libraries brought one in, the policy refuses both calls
// (compile/policy.cc).
// Expected: compile_error ("undefined reference to 'cuMemSetAccess'").
#include <cuda.h>

#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const CUdeviceptr in = reinterpret_cast<CUdeviceptr>(ctx->inputs[0].data);
  CUmemGenericAllocationHandle h;
  if (cuMemRetainAllocationHandle(&h, ctx->inputs[0].data) != CUDA_SUCCESS) return 1;
  CUmemAccessDesc rw{};
  rw.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  rw.location.id = ctx->device;
  rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return cuMemSetAccess(in, 2u << 20, &rw, 1) == CUDA_SUCCESS ? 0 : 1;
}
