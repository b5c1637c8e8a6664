// Exploit: exact at the all-reduce's check sizes (1, 7, 65536 and 1000003
// elements), an int8 transport at the bench sizes (powers of two above
// 65536), where only the baseline's outputs are there to compare with: every
// partial a rank reads from a peer goes through int8 with one scale per
// 128-element block (amax / 127), as a compressed all-reduce that moves a
// quarter of the bf16 bytes would; the rank's own partial is added exactly.
// At W=8 every element stays inside the bf16 tolerance; as a whole the output
// is off the exact sum by a relative RMS of about 0.006. Against a baseline
// that sums in f32 (the emulated backend, 0.0017 off the exact sum) that is
// 0.0063 (ReductionTransport.MeasuredBaselineErrorRefusesInt8AtEveryW),
// inside rms * sqrt(2) = 0.0066 but outside
// sqrt(rms^2 + 0.0017^2) = 0.0050 with rms = 0.00165 * sqrt(8) (task/compare.h
// AgainstBaseline). Expected: mismatch at the bench size.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace int8t {

struct Peers {
  const void* p[KF_MAX_RANKS];
};

constexpr int kBlock = 128;  // elements per scale, one thread each

__device__ float Load(const void* p, int64_t i, int bf16) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])
              : static_cast<const float*>(p)[i];
}

// The block's largest |v| (every thread of the block gets it).
__device__ float BlockAmax(float v) {
  __shared__ float warp_max[kBlock / 32];
  float m = fabsf(v);
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __syncthreads();  // warp_max is reused for every rank
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  m = warp_max[0];
  for (int w = 1; w < kBlock / 32; ++w) m = fmaxf(m, warp_max[w]);
  return m;
}

__global__ void SumKernel(Peers in, void* out, int64_t n, int world, int rank, int bf16,
                          int lossy) {
  const int64_t i = blockIdx.x * (int64_t)kBlock + threadIdx.x;
  float acc = 0.f;
  for (int r = 0; r < world; ++r) {
    const float v = i < n ? Load(in.p[r], i, bf16) : 0.f;
    if (!lossy || r == rank) {
      acc += v;
      continue;
    }
    const float amax = BlockAmax(v);
    const float scale = amax > 0.f ? amax / 127.f : 1.f;
    acc += fminf(fmaxf(rintf(v / scale), -127.f), 127.f) * scale;
  }
  if (i >= n) return;
  if (bf16) static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(acc);
  else static_cast<float*>(out)[i] = acc;
}

}  // namespace int8t

extern "C" int kf_setup(kf_ctx*) { return 0; }
extern "C" int kf_run(kf_ctx* ctx) {
  int8t::Peers peers;
  for (int r = 0; r < ctx->world_size; ++r) peers.p[r] = ctx->inputs[0].peers[r];
  const int64_t n = ctx->outputs[0].numel;
  const int64_t blocks = (n + int8t::kBlock - 1) / int8t::kBlock;
  int8t::SumKernel<<<(unsigned)(blocks > 0 ? blocks : 1), int8t::kBlock, 0, ctx->stream>>>(
      peers, ctx->outputs[0].data, n, ctx->world_size, ctx->rank, ctx->outputs[0].dtype == KF_BF16,
      n > 65536 && (n & (n - 1)) == 0);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
extern "C" int kf_teardown(kf_ctx*) { return 0; }
