// TP RMSNorm baseline: a row kernel writes each row's local sum of squares
// (fp32) to the workspace, one harness all-reduce sums them over the ranks,
// and a second row kernel normalises and applies the weight (HF's roundings).
#include <cuda_bf16.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Sum over the block; every thread gets the total.
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
  __syncthreads();  // `partial` and `total` are reused by the next row
  return t;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    RowSumSquares(const T* h, float* ss, int64_t m, int64_t n) {
  for (int64_t row = blockIdx.x; row < m; row += gridDim.x) {
    const T* x = h + row * n;
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < n; c += kThreads) {
      const float v = ToFloat(x[c]);
      s += v * v;
    }
    s = BlockSum(s);
    if (threadIdx.x == 0) ss[row] = s;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    Normalize(const T* h, const T* w, const float* ss, T* y, int64_t m, int64_t n, float inv_count,
              float eps) {
  for (int64_t row = blockIdx.x; row < m; row += gridDim.x) {
    const float inv = rsqrtf(ss[row] * inv_count + eps);
    const T* x = h + row * n;
    T* out = y + row * n;
    for (int64_t c = threadIdx.x; c < n; c += kThreads) {
      const T normed = FromFloat<T>(ToFloat(x[c]) * inv);
      out[c] = FromFloat<T>(ToFloat(w[c]) * ToFloat(normed));
    }
  }
}

template <typename T>
int Run(kf_ctx* ctx) {
  const kf_tensor* h = kf_input(ctx, "h");
  const kf_tensor* w = kf_input(ctx, "w");
  kf_tensor* y = kf_output(ctx, "y");
  if (h == nullptr || w == nullptr || y == nullptr || h->ndim != 2) return 1;
  const int64_t m = h->shape[0], n = h->shape[1];
  if (ctx->workspace.nbytes < 2 * m * sizeof(float)) return 1;
  float* local = static_cast<float*>(ctx->workspace.data);
  float* total = local + m;
  const int grid = static_cast<int>(m < 65535 ? m : 65535);
  RowSumSquares<T><<<grid, kThreads, 0, ctx->stream>>>(static_cast<const T*>(h->data), local, m, n);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_reduce(ctx, local, total, static_cast<size_t>(m), KF_F32, KF_SUM) != 0) return 1;
  const float eps = static_cast<float>(kf_param(ctx, "eps", 1e-5));
  const float inv_count = 1.0f / static_cast<float>(n * ctx->world_size);
  Normalize<T><<<grid, kThreads, 0, ctx->stream>>>(static_cast<const T*>(h->data),
                                                   static_cast<const T*>(w->data), total,
                                                   static_cast<T*>(y->data), m, n, inv_count, eps);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  switch (ctx->inputs[0].dtype) {
    case KF_BF16:
      return Run<__nv_bfloat16>(ctx);
    case KF_F32:
      return Run<float>(ctx);
    default:
      return 2;
  }
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
