// Sequence-parallel LayerNorm + all-gather baseline, as Megatron-LM runs it:
// the LayerNorm kernel on the rank's sequence shard (fp32 statistics, one bf16
// rounding of the output, as Apex / Transformer Engine LayerNorm) into the
// workspace, then gather_from_sequence_parallel_region (one harness
// all-gather, NCCL when every rank has its own GPU) into y.
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
    LayerNorm(const __nv_bfloat16* x, const __nv_bfloat16* gamma, const __nv_bfloat16* beta,
              __nv_bfloat16* out, int64_t rows, int64_t h, float eps) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const __nv_bfloat16* xr = x + row * h;
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < h; c += kThreads) s += __bfloat162float(xr[c]);
    const float mu = BlockSum(s) / static_cast<float>(h);
    float ss = 0.f;
    for (int64_t c = threadIdx.x; c < h; c += kThreads) {
      const float d = __bfloat162float(xr[c]) - mu;
      ss += d * d;
    }
    const float rstd = rsqrtf(BlockSum(ss) / static_cast<float>(h) + eps);
    for (int64_t c = threadIdx.x; c < h; c += kThreads) {
      const float v = (__bfloat162float(xr[c]) - mu) * rstd;
      out[row * h + c] =
          __float2bfloat16_rn(v * __bfloat162float(gamma[c]) + __bfloat162float(beta[c]));
    }
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor* x = kf_input(ctx, "x");
  const kf_tensor* gamma = kf_input(ctx, "gamma");
  const kf_tensor* beta = kf_input(ctx, "beta");
  kf_tensor* y = kf_output(ctx, "y");
  if (x == nullptr || gamma == nullptr || beta == nullptr || y == nullptr || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], h = x->shape[1];
  if (ctx->workspace.nbytes < static_cast<size_t>(rows * h) * sizeof(__nv_bfloat16)) return 1;
  auto* shard = static_cast<__nv_bfloat16*>(ctx->workspace.data);
  const float eps = static_cast<float>(kf_param(ctx, "eps", 1e-5));
  const int grid = static_cast<int>(rows < 65535 ? rows : 65535);
  LayerNorm<<<grid, kThreads, 0, ctx->stream>>>(
      static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(gamma->data),
      static_cast<const __nv_bfloat16*>(beta->data), shard, rows, h, eps);
  if (cudaGetLastError() != cudaSuccess) return 1;
  return kf_all_gather(ctx, shard, y->data, static_cast<size_t>(rows * h), KF_BF16);
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
