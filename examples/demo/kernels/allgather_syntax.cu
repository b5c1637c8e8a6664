// All-gather: a rank barrier, then every thread copies one element of one row
// (row p = rank p's x) from the owner's buffer, then a closing barrier.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

// Slot layout of the signal pad: [0, W) = the epoch each peer last signalled;
// kEpochSlot = this rank's own barrier counter (lives with the pad, so it
// starts from zero exactly when the pad does).
constexpr int kEpochSlot = KF_MAX_RANKS;

__global__ void RankBarrier(kf_buffer pad, int rank, int world) {
  uint32_t* mine = static_cast<uint32_t*>(pad.data);
  __shared__ uint32_t epoch;
  if (threadIdx.x == 0) epoch = mine[kEpochSlot] + 1;
  __syncthreads();
  const int peer = threadIdx.x;
  if (peer < world && peer != rank) {
    kf_signal(static_cast<uint32_t*>(pad.peers[peer]) + rank, epoch);
    kf_wait(mine + peer, epoch);
  }
  __syncthreads();
  if (threadIdx.x == 0) mine[kEpochSlot] = epoch;
}

// Copies element by element, in the tensor's element size.
template <typename T>
__global__ void GatherRows(kf_tensor x, T* y, int64_t n, int rows) {
  const int64_t total = n * rows;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t p = i / n;
    const int64_t j = i - p * n
    y[i] = static_cast<const T*>(x.peers[p])[j];
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }
extern "C" int kf_teardown(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  kf_tensor* x = kf_input(ctx, "x");
  kf_tensor* y = kf_output(ctx, "y");
  if (!x || !y) return 1;
  const int rows = ctx->world_size;
  RankBarrier<<<1, 32, 0, ctx->stream>>>(ctx->signal_pad, ctx->rank, ctx->world_size);
  if (x->numel > 0) {
    switch (kf_dtype_size(x->dtype)) {
      case 2: GatherRows<uint16_t><<<64, 256, 0, ctx->stream>>>(*x, static_cast<uint16_t*>(y->data), x->numel, rows); break;
      case 4: GatherRows<uint32_t><<<64, 256, 0, ctx->stream>>>(*x, static_cast<uint32_t*>(y->data), x->numel, rows); break;
      case 8: GatherRows<uint64_t><<<64, 256, 0, ctx->stream>>>(*x, static_cast<uint64_t*>(y->data), x->numel, rows); break;
      default: GatherRows<uint8_t><<<64, 256, 0, ctx->stream>>>(*x, static_cast<uint8_t*>(y->data), x->numel, rows); break;
    }
  }
  RankBarrier<<<1, 32, 0, ctx->stream>>>(ctx->signal_pad, ctx->rank, ctx->world_size);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
