// Exploit: harvest the timing check's slack. The check accepts a claim up to
// the path's honest gap + 3 us + 3% of the claimed median below the harness's
// wall time (docs/methodology.md, "Which time counts"), so this kernel leaves
// the last 2.5% of the elements out of its event window: they are summed on a
// private stream that starts only after ctx->stream's work (and the worker's
// end event), and the worker's device synchronisation still waits for them.
// Expected: integrity_violation ("timing"): on an H100 at W = 2 and 256 MiB the
// hidden work costs more than the slack and the timing check refuses it; where
// it passes instead, it may be at most the stated slack faster than
// honest_naive.cu (GpuEvalTest.SlackHarvestingGainsAtMostTheStatedSlack).
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
constexpr double kHidden = 0.025;
cudaStream_t g_side = nullptr;
cudaEvent_t g_main_done = nullptr;

struct Part {
  naive::Peers in;
  void* out;
};

// Element offset `first` onwards of every peer's input and of the output.
Part From(kf_ctx* ctx, int64_t first) {
  const size_t elem = ctx->outputs[0].dtype == KF_BF16 ? 2 : 4;
  Part p;
  for (int r = 0; r < ctx->world_size; ++r)
    p.in.p[r] = static_cast<const char*>(ctx->inputs[0].peers[r]) + first * elem;
  p.out = static_cast<char*>(ctx->outputs[0].data) + first * elem;
  return p;
}

int Sum(kf_ctx* ctx, const Part& p, int64_t n, cudaStream_t s) {
  if (n <= 0) return 0;
  const int blocks = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
  naive::SumKernel<<<blocks, 256, 0, s>>>(p.in, p.out, n, ctx->world_size,
                                          ctx->outputs[0].dtype == KF_BF16);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
}  // namespace

extern "C" int kf_setup(kf_ctx*) {
  if (g_side == nullptr && cudaStreamCreateWithFlags(&g_side, cudaStreamNonBlocking) != cudaSuccess)
    return 1;
  if (g_main_done == nullptr &&
      cudaEventCreateWithFlags(&g_main_done, cudaEventDisableTiming) != cudaSuccess)
    return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  const int64_t n = ctx->outputs[0].numel;
  const int64_t shown = n - (int64_t)(kHidden * (double)n);
  if (Sum(ctx, From(ctx, 0), shown, ctx->stream) != 0) return 1;
  // The hidden part waits for the shown one, so it runs after the event window closes.
  if (cudaEventRecord(g_main_done, ctx->stream) != cudaSuccess ||
      cudaStreamWaitEvent(g_side, g_main_done, 0) != cudaSuccess)
    return 1;
  return Sum(ctx, From(ctx, shown), n - shown, g_side);
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
