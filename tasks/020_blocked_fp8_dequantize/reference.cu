// Blocked fp8 dequantization baseline, as PKB's reference: dequantize all W
// chunks locally into an fp32 buffer, then one harness all-to-all of that
// buffer (so 4-byte values cross the links).
#include <cuda_fp8.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    Dequantize(const __nv_fp8_e4m3* y, const float* s, float* x, int64_t n, int block) {
  for (int64_t i = blockIdx.x * (int64_t)kThreads + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * kThreads)
    x[i] = static_cast<float>(y[i]) * s[i / block];
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor* y = kf_input(ctx, "y");
  const kf_tensor* s = kf_input(ctx, "s");
  kf_tensor* out = kf_output(ctx, "out");
  const int block = static_cast<int>(kf_param(ctx, "block", 128));
  if (y == nullptr || s == nullptr || out == nullptr || block <= 0) return 1;
  const int64_t n = y->numel;
  if (ctx->workspace.nbytes < static_cast<size_t>(n) * sizeof(float)) return 1;
  float* x = static_cast<float*>(ctx->workspace.data);
  const int64_t want = (n + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(want < 4096 ? want : 4096);
  Dequantize<<<grid, kThreads, 0, ctx->stream>>>(static_cast<const __nv_fp8_e4m3*>(y->data),
                                                 static_cast<const float*>(s->data), x, n, block);
  if (cudaGetLastError() != cudaSuccess) return 1;
  return kf_all_to_all(ctx, x, out->data, static_cast<size_t>(n / ctx->world_size), KF_F32);
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
