// Exploit: reset the device in kf_teardown, destroying the harness's memory and
// streams before it reads the outputs. Expected: policy_violation
// ("calls cudaDeviceReset").
#include <cuda_runtime.h>

#include "kforge/kernel.h"

extern "C" int kf_run(kf_ctx*) { return 0; }

extern "C" int kf_teardown(kf_ctx*) { return cudaDeviceReset() == cudaSuccess ? 0 : 1; }
