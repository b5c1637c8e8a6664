// Sinkhorn-Knopp baseline, as dinov2 does it, with Q kept (transposed, as the
// output y[B, K]) in the output buffer: an exp kernel that also forms the
// local row sums; then per iteration a harness all-reduce of the K row sums
// (NCCL on real GPUs), a per-sample kernel that divides by them and by its
// column sum, and (before the next iteration) a kernel for the next row sums.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerChunk = 64;

// y = exp(x / temp); rs[k] += sum over this chunk's samples of y[:, k].
__global__ void __launch_bounds__(kThreads)
    ExpRowSums(const float* x, float* y, float* rs, int64_t b, int64_t k, float inv_temp) {
  const int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (p >= k) return;
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kRowsPerChunk;
  const int64_t i1 = i0 + kRowsPerChunk < b ? i0 + kRowsPerChunk : b;
  float s = 0.f;
  for (int64_t i = i0; i < i1; ++i) {
    const float v = __expf(x[i * k + p] * inv_temp);
    y[i * k + p] = v;
    s += v;
  }
  atomicAdd(&rs[p], s);
}

__global__ void __launch_bounds__(kThreads)
    RowSums(const float* y, float* rs, int64_t b, int64_t k) {
  const int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (p >= k) return;
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kRowsPerChunk;
  const int64_t i1 = i0 + kRowsPerChunk < b ? i0 + kRowsPerChunk : b;
  float s = 0.f;
  for (int64_t i = i0; i < i1; ++i) s += y[i * k + p];
  atomicAdd(&rs[p], s);
}

// One block per sample i: v = y / rs / K, then y = v / sum(v).
__global__ void __launch_bounds__(kThreads) ColNorm(float* y, const float* rs, int64_t k) {
  __shared__ float part[kThreads / 32];
  __shared__ float total;
  float* row = y + static_cast<int64_t>(blockIdx.x) * k;
  const float inv_k = 1.f / static_cast<float>(k);
  float s = 0.f;
  for (int64_t p = threadIdx.x; p < k; p += blockDim.x) s += row[p] / rs[p] * inv_k;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int w = 0; w < kThreads / 32; ++w) t += part[w];
    total = t;
  }
  __syncthreads();
  const float inv = 1.f / total;
  for (int64_t p = threadIdx.x; p < k; p += blockDim.x) row[p] = row[p] / rs[p] * inv_k * inv;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  kf_tensor* x = kf_input(ctx, "teacher_output");
  kf_tensor* y = kf_output(ctx, "q");
  if (x == nullptr || y == nullptr || x->ndim != 2 || y->numel != x->numel) return 1;
  return ctx->workspace.nbytes >= static_cast<size_t>(x->shape[1]) * sizeof(float) ? 0 : 1;
}

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = *kf_input(ctx, "teacher_output");
  float* y = static_cast<float*>(kf_output(ctx, "q")->data);
  const int64_t b = x.shape[0], k = x.shape[1];
  const float inv_temp = 1.f / static_cast<float>(kf_param(ctx, "teacher_temp", 0.07));
  const int iters = static_cast<int>(kf_param(ctx, "n_iterations", 3));
  float* rs = static_cast<float*>(ctx->workspace.data);
  const dim3 grid(static_cast<unsigned>((k + kThreads - 1) / kThreads),
                  static_cast<unsigned>((b + kRowsPerChunk - 1) / kRowsPerChunk));
  if (cudaMemsetAsync(rs, 0, k * sizeof(float), ctx->stream) != cudaSuccess) return 1;
  ExpRowSums<<<grid, kThreads, 0, ctx->stream>>>(static_cast<const float*>(x.data), y, rs, b, k,
                                                 inv_temp);
  for (int it = 0; it < iters; ++it) {
    if (it > 0) {
      if (cudaMemsetAsync(rs, 0, k * sizeof(float), ctx->stream) != cudaSuccess) return 1;
      RowSums<<<grid, kThreads, 0, ctx->stream>>>(y, rs, b, k);
    }
    if (cudaGetLastError() != cudaSuccess) return 1;
    if (kf_all_reduce(ctx, rs, rs, static_cast<size_t>(k), KF_F32, KF_SUM) != 0) return 1;
    ColNorm<<<static_cast<unsigned>(b), kThreads, 0, ctx->stream>>>(y, rs, k);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
