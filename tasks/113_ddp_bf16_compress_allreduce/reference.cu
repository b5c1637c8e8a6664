// DDP bf16 compression hook baseline (torch/distributed/algorithms/ddp_comm_hooks/
// default_hooks.py, bf16_compress_hook): bucket.to(bf16).div_(W), one bf16 all-reduce
// (NCCL's ring: partials rounded to bf16 at every hop), copied back into the f32 bucket.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

__global__ void Compress(const float* grad, __nv_bfloat16* out, int64_t n, float world) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // Two roundings, as the hook's .to(bfloat16) then .div_(world_size) in bf16.
    const __nv_bfloat16 h = __float2bfloat16_rn(grad[i]);
    out[i] = __float2bfloat16_rn(__bfloat162float(h) / world);
  }
}

__global__ void Decompress(const __nv_bfloat16* in, float* grad, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    grad[i] = __bfloat162float(in[i]);
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  kf_tensor& grad = *kf_input(ctx, "grad");
  const int64_t n = grad.numel;
  if (static_cast<size_t>(n) * 2 > ctx->workspace.nbytes) return 1;
  __nv_bfloat16* buf = static_cast<__nv_bfloat16*>(ctx->workspace.data);
  const int64_t want = (n + 255) / 256;
  const int grid = static_cast<int>(want < 4 * ctx->gpu.sm_count ? want : 4 * ctx->gpu.sm_count);
  Compress<<<grid, 256, 0, ctx->stream>>>(static_cast<const float*>(grad.data), buf, n,
                                          static_cast<float>(ctx->world_size));
  if (cudaGetLastError() != cudaSuccess) return 2;
  if (kf_all_reduce(ctx, buf, buf, static_cast<size_t>(n), KF_BF16, KF_SUM) != 0) return 3;
  Decompress<<<grid, 256, 0, ctx->stream>>>(buf, static_cast<float*>(grad.data), n);
  return cudaGetLastError() != cudaSuccess ? 4 : 0;
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
