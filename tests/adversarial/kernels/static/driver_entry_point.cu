// Exploit: fetch a driver function by name at run time, reaching what the
// import check would refuse (here multicast object creation). Expected:
// policy_violation ("calls cudaGetDriverEntryPoint").
#include <cuda_runtime.h>

#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  cudaGetDriverEntryPoint("cuMulticastCreate", &fn, cudaEnableDefault, &found);
  return 0;
}

extern "C" int kf_run(kf_ctx*) { return 0; }
