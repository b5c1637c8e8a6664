// Exploit: remember the output of each input address and replay it with a copy
// (cheaper than the reduction) when the address comes back. Expected: mismatch
// (every round of timed calls gets fresh input values).
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

namespace {
struct Entry {
  const void* in = nullptr;
  void* saved = nullptr;
};
Entry g_cache[64];
}
extern "C" int kf_setup(kf_ctx*) { return 0; }
extern "C" int kf_run(kf_ctx* ctx) {
  const size_t bytes = ctx->outputs[0].nbytes;
  for (Entry& e : g_cache) {
    if (e.in == ctx->inputs[0].data && e.saved != nullptr) {
      return cudaMemcpyAsync(ctx->outputs[0].data, e.saved, bytes, cudaMemcpyDeviceToDevice, ctx->stream) ==
                     cudaSuccess ? 0 : 1;
    }
  }
  if (naive::Launch(ctx, ctx->stream) != 0) return 1;
  for (Entry& e : g_cache) {
    if (e.in == nullptr) {
      if (cudaMalloc(&e.saved, bytes) != cudaSuccess) return 1;
      e.in = ctx->inputs[0].data;
      return cudaMemcpyAsync(e.saved, ctx->outputs[0].data, bytes, cudaMemcpyDeviceToDevice, ctx->stream) ==
                     cudaSuccess ? 0 : 1;
    }
  }
  return 0;
}
extern "C" int kf_teardown(kf_ctx*) { return 0; }
