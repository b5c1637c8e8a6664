// Quantized gradient all-reduce baseline, as PKB's reference: int8 block
// quantize + dequantize locally (one warp per block) into an fp32 buffer, one
// harness all-reduce (sum, fp32) of that buffer, then out = bf16(sum / W). The
// quantization saves no bandwidth here: 4-byte values cross the links.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

// Block `b` of the gradient, lanes striding over its elements.
__global__ void __launch_bounds__(kThreads)
    QuantDequant(const __nv_bfloat16* g, float* d, int64_t n, int block) {
  const int lane = threadIdx.x & 31;
  const int64_t blocks = (n + block - 1) / block;
  for (int64_t b = (blockIdx.x * (int64_t)kThreads + threadIdx.x) / 32; b < blocks;
       b += (int64_t)gridDim.x * kThreads / 32) {
    const int64_t b0 = b * block, b1 = b0 + block < n ? b0 + block : n;
    float amax = 0.f;
    for (int64_t i = b0 + lane; i < b1; i += 32) amax = fmaxf(amax, fabsf(__bfloat162float(g[i])));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = __fdiv_rn(fmaxf(amax, 1e-8f), 127.0f);
    for (int64_t i = b0 + lane; i < b1; i += 32) {
      const float q = fminf(fmaxf(rintf(__fdiv_rn(__bfloat162float(g[i]), scale)), -127.f), 127.f);
      d[i] = __fmul_rn(q, scale);
    }
  }
}

__global__ void Finish(const float* sum, __nv_bfloat16* out, int64_t n, float inv_world) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    out[i] = __float2bfloat16_rn(sum[i] * inv_world);
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor* g = kf_input(ctx, "g");
  kf_tensor* out = kf_output(ctx, "out");
  const int block = static_cast<int>(kf_param(ctx, "block", 128));
  if (g == nullptr || out == nullptr || block <= 0) return 1;
  const int64_t n = g->numel;
  const size_t sum_offset = (static_cast<size_t>(n) * 4 + 255) / 256 * 256;
  if (ctx->workspace.nbytes < sum_offset + static_cast<size_t>(n) * 4) return 1;
  float* d = static_cast<float*>(ctx->workspace.data);
  float* sum = reinterpret_cast<float*>(static_cast<char*>(ctx->workspace.data) + sum_offset);
  const int64_t blocks = (n + block - 1) / block;
  const int64_t want = (blocks * 32 + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(want < 4096 ? want : 4096);
  QuantDequant<<<grid, kThreads, 0, ctx->stream>>>(static_cast<const __nv_bfloat16*>(g->data), d, n,
                                                   block);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_reduce(ctx, d, sum, static_cast<size_t>(n), KF_F32, KF_SUM) != 0) return 1;
  Finish<<<grid, kThreads, 0, ctx->stream>>>(sum, static_cast<__nv_bfloat16*>(out->data), n,
                                             1.0f / static_cast<float>(ctx->world_size));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
