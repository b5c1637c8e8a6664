// fp8 reduce-scatter baseline, as PKB's reference does it: amax of the local
// gradient, the updated history and scale, the e4m3 round trip into a bf16
// buffer, then one harness reduce-scatter (mean) of that bf16 buffer, so
// 2-byte values cross the links.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kHistory = 16;
constexpr size_t kReconOffset = 256;  // workspace: [amax bits, scale] then recon

__global__ void __launch_bounds__(kThreads)
    Amax(const __nv_bfloat16* g, int64_t n, unsigned* amax_bits) {
  float m = 0.f;
  for (int64_t i = blockIdx.x * (int64_t)kThreads + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * kThreads)
    m = fmaxf(m, fabsf(__bfloat162float(g[i])));
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  // Non-negative floats order like their bits.
  if ((threadIdx.x & 31) == 0) atomicMax(amax_bits, __float_as_uint(m));
}

__global__ void Finish(const __nv_bfloat16* hist, __nv_bfloat16* hist_out,
                       const unsigned* amax_bits, float* scale) {
  if (threadIdx.x != 0) return;
  float a = __bfloat162float(__float2bfloat16_rn(1e-12f));
  for (int j = 0; j < kHistory; ++j) {
    const __nv_bfloat16 v =
        j + 1 < kHistory ? hist[j + 1] : __float2bfloat16_rn(__uint_as_float(*amax_bits));
    hist_out[j] = v;
    a = fmaxf(a, __bfloat162float(v));
  }
  *scale = __fdiv_rn(a, 448.0f);
}

__global__ void __launch_bounds__(kThreads)
    RoundTrip(const __nv_bfloat16* g, int64_t n, const float* scale, __nv_bfloat16* recon) {
  const float s = *scale;
  for (int64_t i = blockIdx.x * (int64_t)kThreads + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * kThreads) {
    const __nv_fp8_e4m3 q(__fdiv_rn(__bfloat162float(g[i]), s));
    recon[i] = __float2bfloat16_rn(__fmul_rn(static_cast<float>(q), s));
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor* g = kf_input(ctx, "g");
  const kf_tensor* hist = kf_input(ctx, "hist");
  kf_tensor* shard = kf_output(ctx, "shard");
  kf_tensor* hist_out = kf_output(ctx, "hist_out");
  if (g == nullptr || hist == nullptr || shard == nullptr || hist_out == nullptr) return 1;
  const int64_t n = g->numel;
  if (ctx->workspace.nbytes < kReconOffset + n * sizeof(__nv_bfloat16)) return 1;
  char* ws = static_cast<char*>(ctx->workspace.data);
  unsigned* amax_bits = reinterpret_cast<unsigned*>(ws);
  float* scale = reinterpret_cast<float*>(ws + 4);
  __nv_bfloat16* recon = reinterpret_cast<__nv_bfloat16*>(ws + kReconOffset);
  const auto* gd = static_cast<const __nv_bfloat16*>(g->data);
  const int64_t want = (n + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(want < 1024 ? want : 1024);
  if (cudaMemsetAsync(amax_bits, 0, sizeof(unsigned), ctx->stream) != cudaSuccess) return 1;
  Amax<<<grid, kThreads, 0, ctx->stream>>>(gd, n, amax_bits);
  Finish<<<1, 32, 0, ctx->stream>>>(static_cast<const __nv_bfloat16*>(hist->data),
                                    static_cast<__nv_bfloat16*>(hist_out->data), amax_bits, scale);
  RoundTrip<<<grid, kThreads, 0, ctx->stream>>>(gd, n, scale, recon);
  if (cudaGetLastError() != cudaSuccess) return 1;
  return kf_reduce_scatter(ctx, recon, shard->data, static_cast<size_t>(shard->numel), KF_BF16,
                           KF_AVG);
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
