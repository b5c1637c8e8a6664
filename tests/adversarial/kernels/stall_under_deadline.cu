// Exploit: cost the run as much time as the deadlines allow without ever
// missing one. Every call does the work, then waits 0.3 s (well inside the
// 60 s per-call deadline): twenty check trials, the bench sizes and their
// timed calls would take many minutes. Expected: timeout (the evaluation's
// budget of call time runs out; GpuEvalTest.AKernelThatStallsUnderEveryDeadlineRunsOutOfBudget
// gives it 3 s).
#include <cuda_bf16.h>
#include <stdint.h>
#include <unistd.h>

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

extern "C" int kf_setup(kf_ctx*) { return 0; }
extern "C" int kf_run(kf_ctx* ctx) {
  if (naive::Launch(ctx, ctx->stream) != 0) return 1;
  usleep(300 * 1000);
  return 0;
}
extern "C" int kf_teardown(kf_ctx*) { return 0; }
