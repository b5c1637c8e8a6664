// Exploit: 001_allreduce does not allow cuBLAS; load it for a vendor-tuned
// axpy. Expected: policy_violation
// ("includes cublas_v2.h: this task does not allow cuBLAS").
#include <cublas_v2.h>

#include "kforge/kernel.h"

static cublasHandle_t handle;

extern "C" int kf_setup(kf_ctx*) { return cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS ? 0 : 1; }

extern "C" int kf_run(kf_ctx*) { return 0; }
