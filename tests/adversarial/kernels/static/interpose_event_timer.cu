// Exploit: define cudaEventElapsedTime so that the worker's own timing call
// binds to this one and reports a microsecond for every call. Expected:
// policy_violation ("defines cudaEventElapsedTime").
#include <cuda_runtime.h>

#include "kforge/kernel.h"

extern "C" cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 0.001f;
  return cudaSuccess;
}

extern "C" int kf_run(kf_ctx*) { return 0; }
