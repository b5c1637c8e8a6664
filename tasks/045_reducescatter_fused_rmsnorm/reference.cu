// Reduce-scatter + RMSNorm baseline, as PKB's reference: one harness
// reduce-scatter (sum, bf16) of x into the workspace, then a row kernel that
// divides by W (rounding to bf16, as PKB's in-place div_ does), takes the fp32
// sum of squares of the row and writes gamma * s * inv.
#include <cuda_bf16.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

__device__ float BlockSum(float v) {
  __shared__ float partial[kThreads / 32];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int i = 0; i < kThreads / 32; ++i) s += partial[i];
    total = s;
  }
  __syncthreads();
  const float t = total;
  __syncthreads();
  return t;
}

__global__ void __launch_bounds__(kThreads)
    MeanRmsNorm(const __nv_bfloat16* sum, const __nv_bfloat16* gamma, __nv_bfloat16* y,
                int64_t rows, int64_t h, float inv_world, float eps) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const __nv_bfloat16* s = sum + row * h;
    float ss = 0.f;
    for (int64_t c = threadIdx.x; c < h; c += kThreads) {
      const float v = __bfloat162float(__float2bfloat16_rn(__bfloat162float(s[c]) * inv_world));
      ss += v * v;
    }
    const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(h) + eps);
    for (int64_t c = threadIdx.x; c < h; c += kThreads) {
      const float v = __bfloat162float(__float2bfloat16_rn(__bfloat162float(s[c]) * inv_world));
      y[row * h + c] = __float2bfloat16_rn(v * inv * __bfloat162float(gamma[c]));
    }
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor* x = kf_input(ctx, "x");
  const kf_tensor* gamma = kf_input(ctx, "gamma");
  kf_tensor* y = kf_output(ctx, "y");
  if (x == nullptr || gamma == nullptr || y == nullptr || y->ndim != 2) return 1;
  const int64_t rows = y->shape[0], h = y->shape[1];
  if (ctx->workspace.nbytes < static_cast<size_t>(rows * h) * sizeof(__nv_bfloat16)) return 1;
  auto* sum = static_cast<__nv_bfloat16*>(ctx->workspace.data);
  if (kf_reduce_scatter(ctx, x->data, sum, static_cast<size_t>(rows * h), KF_BF16, KF_SUM) != 0)
    return 1;
  const float eps = static_cast<float>(kf_param(ctx, "eps", 1e-5));
  const int grid = static_cast<int>(rows < 65535 ? rows : 65535);
  MeanRmsNorm<<<grid, kThreads, 0, ctx->stream>>>(
      sum, static_cast<const __nv_bfloat16*>(gamma->data), static_cast<__nv_bfloat16*>(y->data),
      rows, h, 1.0f / static_cast<float>(ctx->world_size), eps);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
