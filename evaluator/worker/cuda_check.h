// Error plumbing for CUDA and NCCL calls inside the worker: every return code
// is checked and turned into a Status naming the call and the error string.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "kforge/core/status.h"

namespace kforge::worker {

inline Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Error(
      ErrorKind::kRuntimeError,
      std::string(what) + ": CUDA error " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

}  // namespace kforge::worker

#define KF_CUDA(call) KF_RETURN_IF_ERROR(::kforge::worker::CudaStatus((call), #call))
