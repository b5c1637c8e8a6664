// All-reduce + residual + RMSNorm baseline, as vLLM runs it without the fusion
// pass: tensor_model_parallel_all_reduce (one harness all-reduce, NCCL when
// every rank has its own GPU, bf16) into the workspace, then
// fused_add_rms_norm's arithmetic (csrc/layernorm_kernels.cu): residual_out =
// bf16(sum + residual), the fp32 mean of its squares, y = bf16(bf16(r * inv) *
// gamma).
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
    FusedAddRmsNorm(const __nv_bfloat16* sum, const __nv_bfloat16* residual,
                    const __nv_bfloat16* gamma, __nv_bfloat16* y, __nv_bfloat16* residual_out,
                    int64_t rows, int64_t h, float eps) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * h;
    float ss = 0.f;
    for (int64_t c = threadIdx.x; c < h; c += kThreads) {
      const __nv_bfloat16 r = __float2bfloat16_rn(__bfloat162float(sum[base + c]) +
                                                  __bfloat162float(residual[base + c]));
      residual_out[base + c] = r;
      const float v = __bfloat162float(r);
      ss += v * v;
    }
    const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(h) + eps);
    // Each thread reads back only the residual_out elements it wrote.
    for (int64_t c = threadIdx.x; c < h; c += kThreads) {
      const float normed =
          __bfloat162float(__float2bfloat16_rn(__bfloat162float(residual_out[base + c]) * inv));
      y[base + c] = __float2bfloat16_rn(normed * __bfloat162float(gamma[c]));
    }
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor* x = kf_input(ctx, "x");
  const kf_tensor* residual = kf_input(ctx, "residual");
  const kf_tensor* gamma = kf_input(ctx, "gamma");
  kf_tensor* y = kf_output(ctx, "y");
  kf_tensor* residual_out = kf_output(ctx, "residual_out");
  if (x == nullptr || residual == nullptr || gamma == nullptr || y == nullptr ||
      residual_out == nullptr || x->ndim != 2)
    return 1;
  const int64_t rows = x->shape[0], h = x->shape[1];
  if (ctx->workspace.nbytes < static_cast<size_t>(rows * h) * sizeof(__nv_bfloat16)) return 1;
  auto* sum = static_cast<__nv_bfloat16*>(ctx->workspace.data);
  if (kf_all_reduce(ctx, x->data, sum, static_cast<size_t>(rows * h), KF_BF16, KF_SUM) != 0)
    return 1;
  const float eps = static_cast<float>(kf_param(ctx, "eps", 1e-5));
  const int grid = static_cast<int>(rows < 65535 ? rows : 65535);
  FusedAddRmsNorm<<<grid, kThreads, 0, ctx->stream>>>(
      sum, static_cast<const __nv_bfloat16*>(residual->data),
      static_cast<const __nv_bfloat16*>(gamma->data), static_cast<__nv_bfloat16*>(y->data),
      static_cast<__nv_bfloat16*>(residual_out->data), rows, h, eps);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
