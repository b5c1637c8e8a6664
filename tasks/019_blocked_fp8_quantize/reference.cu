// Blocked fp8 quantization baseline, as PKB's reference: quantize this rank's
// rows (one warp per 1x128 block) into the workspace, then two harness
// all-gathers, of the fp8 bytes and of the fp32 scales.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kBlock = 128;  // the task's block; 4 elements per lane

__global__ void __launch_bounds__(kThreads)
    Quantize(const __nv_bfloat16* x, uint8_t* q, float* scales, int64_t blocks) {
  const int lane = threadIdx.x & 31;
  for (int64_t b = (blockIdx.x * (int64_t)kThreads + threadIdx.x) / 32; b < blocks;
       b += (int64_t)gridDim.x * kThreads / 32) {
    const __nv_bfloat16* xs = x + b * kBlock + lane * 4;
    float v[4], amax = 0.f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[j] = __bfloat162float(xs[j]);
      amax = fmaxf(amax, fabsf(v[j]));
    }
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float s = __fdiv_rn(amax, 448.0f);
    const float s_safe = s == 0.f ? 1.f : s;
    if (lane == 0) scales[b] = s;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      q[b * kBlock + lane * 4 + j] =
          __nv_cvt_float_to_fp8(__fdiv_rn(v[j], s_safe), __NV_SATFINITE, __NV_E4M3);
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) { return kf_param(ctx, "block", 0) == kBlock ? 0 : 1; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor* x = kf_input(ctx, "x");
  kf_tensor* y = kf_output(ctx, "y");
  kf_tensor* scales = kf_output(ctx, "scales");
  if (x == nullptr || y == nullptr || scales == nullptr) return 1;
  const int64_t n = x->numel, blocks = n / kBlock;
  const size_t scales_offset = (static_cast<size_t>(n) + 255) / 256 * 256;
  if (ctx->workspace.nbytes < scales_offset + blocks * sizeof(float)) return 1;
  uint8_t* q = static_cast<uint8_t*>(ctx->workspace.data);
  float* s = reinterpret_cast<float*>(q + scales_offset);
  const int64_t want = (blocks * 32 + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(want < 4096 ? want : 4096);
  Quantize<<<grid, kThreads, 0, ctx->stream>>>(static_cast<const __nv_bfloat16*>(x->data), q, s,
                                               blocks);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_gather(ctx, q, y->data, static_cast<size_t>(n), KF_U8) != 0) return 1;
  return kf_all_gather(ctx, s, scales->data, static_cast<size_t>(blocks), KF_F32);
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
