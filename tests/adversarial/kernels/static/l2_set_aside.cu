// Exploit: ask for the largest L2 set-aside for persisting accesses, so that
// lines this kernel marks persisting would stay in L2 after it is gone and
// leave the baseline timed after it less cache. Expected: policy_violation
// ("calls cudaDeviceSetLimit").
#include <cuda_runtime.h>

#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) {
  int dev = 0;
  cudaDeviceProp prop;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
    return 1;
  return cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize,
                            static_cast<size_t>(prop.persistingL2CacheMaxSize)) == cudaSuccess
             ? 0
             : 1;
}

extern "C" int kf_run(kf_ctx*) { return 0; }
