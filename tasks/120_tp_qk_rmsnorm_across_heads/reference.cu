// TP QK RMSNorm baseline, as vLLM's MiniMaxText01RMSNormTP does it: one kernel for every token's
// local sums of squares of q and k (fp32), one harness all-reduce of the 2 * T sums (NCCL on real
// GPUs), and one kernel for the norm: x * rsqrt(sum / width + eps) rounded to bf16, times the
// weight shard (rounded to bf16).
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

__device__ float BlockSum(float v, float* smem) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = v;
  __syncthreads();
  float s = 0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < kThreads / 32; ++w) s += smem[w];
    smem[kThreads / 32] = s;
  }
  __syncthreads();
  s = smem[kThreads / 32];
  __syncthreads();
  return s;
}

// Block t: sums[2t] = sum of q[t, :]^2, sums[2t + 1] = sum of k[t, :]^2 over this rank's columns.
__global__ void __launch_bounds__(kThreads)
    LocalSums(const __nv_bfloat16* q, const __nv_bfloat16* k, int64_t lq, int64_t lk, float* sums) {
  __shared__ float smem[kThreads / 32 + 1];
  const int64_t t = blockIdx.x;
  float sq = 0, sk = 0;
  for (int64_t j = threadIdx.x; j < lq; j += blockDim.x) {
    const float x = __bfloat162float(q[t * lq + j]);
    sq += x * x;
  }
  for (int64_t j = threadIdx.x; j < lk; j += blockDim.x) {
    const float x = __bfloat162float(k[t * lk + j]);
    sk += x * x;
  }
  sq = BlockSum(sq, smem);
  sk = BlockSum(sk, smem);
  if (threadIdx.x == 0) {
    sums[2 * t] = sq;
    sums[2 * t + 1] = sk;
  }
}

__global__ void __launch_bounds__(kThreads)
    Norm(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* wq,
         const __nv_bfloat16* wk, __nv_bfloat16* q_out, __nv_bfloat16* k_out, int64_t lq,
         int64_t lk, float qd, float kd, float eps, const float* sums) {
  const int64_t t = blockIdx.x;
  const float sq = rsqrtf(sums[2 * t] / qd + eps);
  const float sk = rsqrtf(sums[2 * t + 1] / kd + eps);
  for (int64_t j = threadIdx.x; j < lq; j += blockDim.x) {
    const __nv_bfloat16 n = __float2bfloat16_rn(__bfloat162float(q[t * lq + j]) * sq);
    q_out[t * lq + j] = __float2bfloat16_rn(__bfloat162float(n) * __bfloat162float(wq[j]));
  }
  for (int64_t j = threadIdx.x; j < lk; j += blockDim.x) {
    const __nv_bfloat16 n = __float2bfloat16_rn(__bfloat162float(k[t * lk + j]) * sk);
    k_out[t * lk + j] = __float2bfloat16_rn(__bfloat162float(n) * __bfloat162float(wk[j]));
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const double tokens = kf_param(ctx, "T", 0);
  if (tokens < 1 || kf_input(ctx, "q") == nullptr || kf_input(ctx, "k") == nullptr) return 1;
  return ctx->workspace.nbytes >= 4 * sizeof(float) * static_cast<size_t>(tokens) ? 0 : 1;
}

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor* q = kf_input(ctx, "q");
  const kf_tensor* k = kf_input(ctx, "k");
  const kf_tensor* wq = kf_input(ctx, "q_weight");
  const kf_tensor* wk = kf_input(ctx, "k_weight");
  kf_tensor* q_out = kf_output(ctx, "q_out");
  kf_tensor* k_out = kf_output(ctx, "k_out");
  const int64_t tokens = q->shape[0], lq = q->shape[1], lk = k->shape[1];
  float* local = static_cast<float*>(ctx->workspace.data);
  float* global = local + 2 * tokens;
  LocalSums<<<static_cast<int>(tokens), kThreads, 0, ctx->stream>>>(
      static_cast<const __nv_bfloat16*>(q->data), static_cast<const __nv_bfloat16*>(k->data), lq,
      lk, local);
  if (cudaGetLastError() != cudaSuccess) return 1;
  const int rc = kf_all_reduce(ctx, local, global, static_cast<size_t>(2 * tokens), KF_F32, KF_SUM);
  if (rc != 0) return rc;
  Norm<<<static_cast<int>(tokens), kThreads, 0, ctx->stream>>>(
      static_cast<const __nv_bfloat16*>(q->data), static_cast<const __nv_bfloat16*>(k->data),
      static_cast<const __nv_bfloat16*>(wq->data), static_cast<const __nv_bfloat16*>(wk->data),
      static_cast<__nv_bfloat16*>(q_out->data), static_cast<__nv_bfloat16*>(k_out->data), lq, lk,
      static_cast<float>(kf_param(ctx, "Qd", 1)), static_cast<float>(kf_param(ctx, "Kd", 1)),
      static_cast<float>(kf_param(ctx, "eps", 1e-6)), global);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
