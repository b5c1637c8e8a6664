// Dispatch all-to-all on the copy engines: a one-block barrier kernel (every
// peer's x is ready), then W peer-to-peer cudaMemcpyAsync pulls of one group
// each, rank r reading group r of rank p into group p of its own y, starting
// with its own group and then the next ranks so that the ranks read from
// different peers at once. The copy engines move the rows at link speed while
// the SMs stay free, which is what expert-parallel layers want (the experts'
// GEMMs overlap the next dispatch).
//
// No end barrier: only peers' inputs are read and only this rank's output is
// written, and a peer's next call cannot pass its start barrier before this
// rank's copies (ordered after this rank's barrier on ctx->stream) are done.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

struct Pads {
  uint32_t* p[KF_MAX_RANKS];
};

// Thread p signals peer p (slot `rank` of its pad) and waits for peer p's
// signal in slot p of this rank's pad; the epoch grows by one per call and is
// kept in device memory, so back-to-back calls never see a stale flag.
__global__ void StartBarrier(Pads pads, uint32_t* epoch, int rank, int world) {
  const uint32_t e = *epoch + 1;
  const int peer = threadIdx.x;
  if (peer < world && peer != rank) {
    kf_signal(pads.p[peer] + rank, e);
    kf_wait(pads.p[rank] + peer, e);
  }
  __syncthreads();
  if (threadIdx.x == 0) *epoch = e;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& y = ctx->outputs[0];
  if (ctx->world_size < 1 || ctx->world_size > 1024 || y.numel != x.numel ||
      y.numel % ctx->world_size != 0 || ctx->signal_pad.nbytes < sizeof(uint32_t) * KF_MAX_RANKS)
    return 1;
  uint32_t* epoch = nullptr;
  if (cudaMalloc(&epoch, sizeof(uint32_t)) != cudaSuccess) return 1;
  if (cudaMemsetAsync(epoch, 0, sizeof(uint32_t), ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
    cudaFree(epoch);
    return 1;
  }
  ctx->user = epoch;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  uint32_t* epoch = static_cast<uint32_t*>(ctx->user);
  if (epoch == nullptr) return 1;
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  const int world = ctx->world_size, rank = ctx->rank;
  Pads pads = {};
  for (int q = 0; q < world; ++q) pads.p[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
  StartBarrier<<<1, 32 * ((world + 31) / 32), 0, ctx->stream>>>(pads, epoch, rank, world);
  if (cudaGetLastError() != cudaSuccess) return 1;
  const size_t group = y.nbytes / static_cast<size_t>(world);
  for (int k = 0; k < world; ++k) {
    const int p = (rank + k) % world;
    const char* src = static_cast<const char*>(x.peers[p]) + static_cast<size_t>(rank) * group;
    char* dst = static_cast<char*>(y.data) + static_cast<size_t>(p) * group;
    if (cudaMemcpyAsync(dst, src, group, cudaMemcpyDeviceToDevice, ctx->stream) != cudaSuccess)
      return 1;
  }
  return 0;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (ctx->user != nullptr && cudaFree(ctx->user) != cudaSuccess) rc = 1;
  ctx->user = nullptr;
  return rc;
}
