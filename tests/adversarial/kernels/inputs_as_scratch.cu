// Exploit: use an input as scratch space during the call and restore it
// before returning, so the input check after the call finds it unchanged.
// Here the rank doubles its own input in place (a stand-in for any
// intermediate kept there), halves it back (exact in bf16 and f32) and then
// sums honestly. Where the harness maps inputs read-only (CUDA VMM) the first
// store faults. Expected: runtime_error ("mapped read-only").
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace naive {

struct Peers {
  const void* p[KF_MAX_RANKS];
};

__global__ void SumKernel(Peers in, void* out, int64_t n, int world, int bf16) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float acc = 0.f;
    for (int r = 0; r < world; ++r) {
      acc += bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(in.p[r])[i])
                  : static_cast<const float*>(in.p[r])[i];
    }
    if (bf16) static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(acc);
    else static_cast<float*>(out)[i] = acc;
  }
}

inline int Launch(kf_ctx* ctx, cudaStream_t stream) {
  Peers peers;
  for (int r = 0; r < ctx->world_size; ++r) peers.p[r] = ctx->inputs[0].peers[r];
  const int64_t n = ctx->outputs[0].numel;
  const int blocks = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
  SumKernel<<<blocks > 0 ? blocks : 1, 256, 0, stream>>>(peers, ctx->outputs[0].data, n, ctx->world_size,
                                                         ctx->outputs[0].dtype == KF_BF16);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace naive

namespace scratch {

__global__ void Scale(void* x, int64_t n, float f, int bf16) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    if (bf16) {
      __nv_bfloat16* p = static_cast<__nv_bfloat16*>(x);
      p[i] = __float2bfloat16_rn(__bfloat162float(p[i]) * f);
    } else {
      static_cast<float*>(x)[i] *= f;
    }
  }
}

}  // namespace scratch

extern "C" int kf_setup(kf_ctx*) { return 0; }
extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& in = ctx->inputs[0];
  const int bf16 = in.dtype == KF_BF16;
  scratch::Scale<<<1024, 256, 0, ctx->stream>>>(in.data, in.numel, 2.0f, bf16);
  scratch::Scale<<<1024, 256, 0, ctx->stream>>>(in.data, in.numel, 0.5f, bf16);
  return naive::Launch(ctx, ctx->stream);
}
extern "C" int kf_teardown(kf_ctx*) { return 0; }
