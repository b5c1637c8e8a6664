// Load-balancing loss baseline: one thread per token row computes the fp32
// softmax and the top-k experts and adds its probabilities and selections into
// per-block shared counters, flushed to two global [E] arrays with atomics; a
// one-block kernel forms this rank's loss / W; one harness all-reduce (NCCL on
// real GPUs) sums those into the output.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxExperts = 256;
constexpr int kMaxTopK = 16;

__device__ __forceinline__ float ToF(float v) { return v; }
__device__ __forceinline__ float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }

// acc[0, E): selections per expert; acc[E, 2E): probability sums per expert.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    RouterStats(const T* logits, int64_t rows, int experts, int k, float* acc) {
  __shared__ float count[kMaxExperts];
  __shared__ float prob[kMaxExperts];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) count[e] = prob[e] = 0.f;
  __syncthreads();
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < rows;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T* row = logits + t * experts;
    float mx = -INFINITY;
    for (int e = 0; e < experts; ++e) mx = fmaxf(mx, ToF(row[e]));
    float z = 0.f;
    for (int e = 0; e < experts; ++e) z += __expf(ToF(row[e]) - mx);
    const float inv = 1.f / z;
    for (int e = 0; e < experts; ++e) atomicAdd(&prob[e], __expf(ToF(row[e]) - mx) * inv);
    // Top-k by logit (softmax is monotonic): k passes, each the largest not yet taken.
    int taken[kMaxTopK];
    for (int j = 0; j < k; ++j) {
      int best = -1;
      float bv = -INFINITY;
      for (int e = 0; e < experts; ++e) {
        bool used = false;
        for (int q = 0; q < j; ++q) used |= taken[q] == e;
        const float v = ToF(row[e]);
        if (!used && (best < 0 || v > bv)) best = e, bv = v;
      }
      taken[j] = best;
      atomicAdd(&count[best], 1.f);
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    atomicAdd(&acc[e], count[e]);
    atomicAdd(&acc[experts + e], prob[e]);
  }
}

// out = (E / W) * sum_e (count_e / N) * (prob_e / N): this rank's share of the mean.
__global__ void RankLoss(const float* acc, int64_t rows, int experts, int world, float* out) {
  __shared__ float part[32];
  float s = 0.f;
  const float n = static_cast<float>(rows);
  for (int e = threadIdx.x; e < experts; e += blockDim.x)
    s += (acc[e] / n) * (acc[experts + e] / n);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int w = 0; w < (blockDim.x + 31) / 32; ++w) t += part[w];
    *out = t * static_cast<float>(experts) / static_cast<float>(world);
  }
}

template <typename T>
int Run(kf_ctx* ctx, const kf_tensor& x, int k, float* out) {
  const int64_t rows = x.shape[0];
  const int experts = static_cast<int>(x.shape[1]);
  float* acc = static_cast<float*>(ctx->workspace.data);
  float* mine = acc + 2 * experts;
  if (cudaMemsetAsync(acc, 0, 2 * experts * sizeof(float), ctx->stream) != cudaSuccess) return 1;
  int64_t blocks = (rows + kThreads - 1) / kThreads;
  const int64_t cap = 2LL * (ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1);
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  RouterStats<T><<<static_cast<int>(blocks), kThreads, 0, ctx->stream>>>(
      static_cast<const T*>(x.data), rows, experts, k, acc);
  RankLoss<<<1, 256, 0, ctx->stream>>>(acc, rows, experts, ctx->world_size, mine);
  if (cudaGetLastError() != cudaSuccess) return 1;
  return kf_all_reduce(ctx, mine, out, 1, KF_F32, KF_SUM) == 0 ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  kf_tensor* x = kf_input(ctx, "gate_logits");
  const int k = static_cast<int>(kf_param(ctx, "top_k", 2));
  if (x == nullptr || kf_output(ctx, "loss") == nullptr || x->ndim != 2) return 1;
  if (x->shape[1] < 1 || x->shape[1] > kMaxExperts || k < 1 || k > kMaxTopK || k > x->shape[1])
    return 1;
  return ctx->workspace.nbytes >= (2 * x->shape[1] + 1) * sizeof(float) ? 0 : 1;
}

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = *kf_input(ctx, "gate_logits");
  const int k = static_cast<int>(kf_param(ctx, "top_k", 2));
  float* out = static_cast<float*>(kf_output(ctx, "loss")->data);
  switch (x.dtype) {
    case KF_BF16:
      return Run<__nv_bfloat16>(ctx, x, k, out);
    case KF_F32:
      return Run<float>(ctx, x, k, out);
    default:
      return 2;
  }
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
