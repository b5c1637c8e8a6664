// The kernels of profiler_gpu_test.cc (nvcc here builds C++17 only; the
// test includes C++20 headers).
#include <cuda_runtime.h>

#include <cstddef>

namespace {

__global__ void FillKernel(float* p, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = static_cast<float>(i % 977) * 0.5f + 1.0f;
}

__global__ void CopyKernel(const float4* src, float4* dst, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    dst[i] = src[i];
}

}  // namespace

cudaError_t LaunchFill(float* p, size_t n) {
  FillKernel<<<1024, 256>>>(p, n);
  return cudaGetLastError();
}

cudaError_t LaunchCopy(const float* src, float* dst, size_t n) {
  CopyKernel<<<132 * 8, 256>>>(reinterpret_cast<const float4*>(src), reinterpret_cast<float4*>(dst),
                               n / 4);
  return cudaGetLastError();
}
