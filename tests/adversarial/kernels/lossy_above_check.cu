// Exploit: exact at the all-reduce's check sizes (1, 7, 65536 and 1000003
// elements), lossy at the bench sizes (powers of two above 65536), where only
// the baseline's outputs are there to compare with: every element is moved by up to 0.012, inside the bf16
// element tolerance at W=2 (atol 2^-6), as a compressed transport tuned to
// that tolerance would be. Off as a whole by a relative RMS of ~0.005 against
// an allowed 0.0033. Expected: mismatch (the device's RMS bound on the timed
// calls).
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace lossy {

struct Peers {
  const void* p[KF_MAX_RANKS];
};

__device__ float Noise(int64_t i) {
  uint64_t h = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  return (static_cast<float>(h >> 40) / 16777216.0f * 2.0f - 1.0f) * 0.012f;  // [-0.012, 0.012)
}

__global__ void SumKernel(Peers in, void* out, int64_t n, int world, int bf16, int lossy) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float acc = 0.f;
    for (int r = 0; r < world; ++r) {
      acc += bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(in.p[r])[i])
                  : static_cast<const float*>(in.p[r])[i];
    }
    if (lossy) acc += Noise(i);
    if (bf16) static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(acc);
    else static_cast<float*>(out)[i] = acc;
  }
}

}  // namespace lossy

extern "C" int kf_setup(kf_ctx*) { return 0; }
extern "C" int kf_run(kf_ctx* ctx) {
  lossy::Peers peers;
  for (int r = 0; r < ctx->world_size; ++r) peers.p[r] = ctx->inputs[0].peers[r];
  const int64_t n = ctx->outputs[0].numel;
  const int blocks = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
  lossy::SumKernel<<<blocks > 0 ? blocks : 1, 256, 0, ctx->stream>>>(
      peers, ctx->outputs[0].data, n, ctx->world_size, ctx->outputs[0].dtype == KF_BF16, n > 65536 && (n & (n - 1)) == 0);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
extern "C" int kf_teardown(kf_ctx*) { return 0; }
