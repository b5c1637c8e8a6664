// Exploit: leave the L2 squeezed for the baseline timed after this kernel.
// It marks a 64 MiB buffer of its own persisting through ctx->stream's
// access-policy window and touches it in every call, so that (were there an
// L2 set-aside to hold them) those lines would stay in L2 after it and the
// after-baseline would run with less cache, reading the speedup high.
// (Asking for a set-aside, cudaDeviceSetLimit, is refused at compile time:
// static/l2_set_aside.cu.) Expected: passed, and no faster than
// honest_naive.cu: kforge's MPS daemon has no set-aside, and the harness
// resets persisting lines and the set-aside before every drive.
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
void* g_junk = nullptr;
size_t g_junk_bytes = 0;

__global__ void Touch(char* p, size_t n) {
  for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * 128; i < n;
       i += (size_t)gridDim.x * blockDim.x * 128)
    p[i] += 1;
}
}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  int dev = 0;
  cudaDeviceProp prop;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return 1;
  g_junk_bytes = (size_t)64 << 20;
  if (prop.accessPolicyMaxWindowSize > 0 && (size_t)prop.accessPolicyMaxWindowSize < g_junk_bytes)
    g_junk_bytes = (size_t)prop.accessPolicyMaxWindowSize;
  if (cudaMalloc(&g_junk, g_junk_bytes) != cudaSuccess) return 1;
  cudaStreamAttrValue attr = {};
  attr.accessPolicyWindow.base_ptr = g_junk;
  attr.accessPolicyWindow.num_bytes = g_junk_bytes;
  attr.accessPolicyWindow.hitRatio = 1.0f;
  attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  (void)cudaStreamSetAttribute(ctx->stream, cudaStreamAttributeAccessPolicyWindow, &attr);
  (void)cudaGetLastError();
  Touch<<<256, 256, 0, ctx->stream>>>(static_cast<char*>(g_junk), g_junk_bytes);
  return cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
}

extern "C" int kf_run(kf_ctx* ctx) {
  // Keep the window's lines the most recently used persisting ones.
  Touch<<<64, 256, 0, ctx->stream>>>(static_cast<char*>(g_junk), g_junk_bytes);
  return naive::Launch(ctx, ctx->stream);
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
