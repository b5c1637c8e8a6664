// LayerNorm parameter-gradient baseline: a column-sum kernel accumulates this
// rank's fp32 partials of dgamma and dbeta (one [2H] buffer), one harness
// all-reduce (fp32) sums them over the ranks, and a small kernel rounds them to
// the output dtype.
#include <cuda_bf16.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// Thread = column (coalesced across a warp); blockIdx.y = a slice of the rows.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ColumnPartials(const T* xh, const T* dy, float* partial, int64_t b, int64_t h,
                   int64_t rows_per_slice) {
  const int64_t c = blockIdx.x * (int64_t)kThreads + threadIdx.x;
  if (c >= h) return;
  const int64_t r0 = blockIdx.y * rows_per_slice;
  const int64_t r1 = r0 + rows_per_slice < b ? r0 + rows_per_slice : b;
  float g = 0.f, s = 0.f;
  for (int64_t i = r0; i < r1; ++i) {
    const float d = ToFloat(dy[i * h + c]);
    g += d * ToFloat(xh[i * h + c]);
    s += d;
  }
  atomicAdd(partial + c, g);
  atomicAdd(partial + h + c, s);
}

template <typename T>
__global__ void Finish(const float* total, T* dgamma, T* dbeta, int64_t h) {
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < h;
       c += (int64_t)gridDim.x * blockDim.x) {
    Store(dgamma + c, total[c]);
    Store(dbeta + c, total[h + c]);
  }
}

template <typename T>
int Run(kf_ctx* ctx) {
  const kf_tensor* xh = kf_input(ctx, "x_hat");
  const kf_tensor* dy = kf_input(ctx, "dy");
  kf_tensor* dgamma = kf_output(ctx, "dgamma");
  kf_tensor* dbeta = kf_output(ctx, "dbeta");
  if (xh == nullptr || dy == nullptr || dgamma == nullptr || dbeta == nullptr || xh->ndim != 2)
    return 1;
  const int64_t b = xh->shape[0], h = xh->shape[1];
  if (ctx->workspace.nbytes < 4 * h * sizeof(float)) return 1;
  float* partial = static_cast<float*>(ctx->workspace.data);
  float* total = partial + 2 * h;
  // Enough row slices to give every SM a few blocks.
  const int64_t col_blocks = (h + kThreads - 1) / kThreads;
  int64_t slices = (4 * static_cast<int64_t>(ctx->gpu.sm_count) + col_blocks - 1) / col_blocks;
  if (slices < 1) slices = 1;
  if (slices > b) slices = b;
  if (slices > 65535) slices = 65535;
  const int64_t rows_per_slice = (b + slices - 1) / slices;
  slices = (b + rows_per_slice - 1) / rows_per_slice;
  if (cudaMemsetAsync(partial, 0, 2 * h * sizeof(float), ctx->stream) != cudaSuccess) return 1;
  ColumnPartials<T><<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(slices)),
                      kThreads, 0, ctx->stream>>>(static_cast<const T*>(xh->data),
                                                  static_cast<const T*>(dy->data), partial, b, h,
                                                  rows_per_slice);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_reduce(ctx, partial, total, static_cast<size_t>(2 * h), KF_F32, KF_SUM) != 0) return 1;
  const int grid = static_cast<int>(col_blocks < 1024 ? col_blocks : 1024);
  Finish<T><<<grid, kThreads, 0, ctx->stream>>>(total, static_cast<T*>(dgamma->data),
                                                static_cast<T*>(dbeta->data), h);
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
