// All-gather, faster: the same rank barriers; each row is copied with 16-byte
// loads and stores when the source and destination line up on 16 bytes (every
// bench size does), by 4, 2 or 1 bytes otherwise, and the grid is sized to the
// GPU (blockIdx.y picks the row) so every peer streams over NVLink at once.
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

template <typename W>
__device__ void CopyWords(const char* src, char* dst, int64_t bytes, int64_t first, int64_t stride) {
  const int64_t words = bytes / (int64_t)sizeof(W);
  for (int64_t w = first; w < words; w += stride) reinterpret_cast<W*>(dst)[w] = reinterpret_cast<const W*>(src)[w];
  for (int64_t b = words * (int64_t)sizeof(W) + first; b < bytes; b += stride) dst[b] = src[b];
}

__global__ void __launch_bounds__(512) GatherRowsWide(kf_tensor x, char* y, int64_t row_bytes) {
  const int p = blockIdx.y;
  const char* src = static_cast<const char*>(x.peers[p]);
  char* dst = y + p * row_bytes;
  const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const uintptr_t align = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst);
  if (align % 16 == 0) {
    CopyWords<uint4>(src, dst, row_bytes, first, stride);
  } else if (align % 4 == 0) {
    CopyWords<uint32_t>(src, dst, row_bytes, first, stride);
  } else if (align % 2 == 0) {
    CopyWords<uint16_t>(src, dst, row_bytes, first, stride);
  } else {
    CopyWords<uint8_t>(src, dst, row_bytes, first, stride);
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }
extern "C" int kf_teardown(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  kf_tensor* x = kf_input(ctx, "x");
  kf_tensor* y = kf_output(ctx, "y");
  if (!x || !y) return 1;
  RankBarrier<<<1, 32, 0, ctx->stream>>>(ctx->signal_pad, ctx->rank, ctx->world_size);
  const int64_t row_bytes = (int64_t)x->nbytes;
  if (row_bytes > 0) {
    constexpr int kThreads = 512;
    int64_t blocks = (row_bytes / 16 + kThreads - 1) / kThreads;
    const int64_t cap = 2LL * (ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 132);
    if (blocks > cap) blocks = cap;
    if (blocks < 1) blocks = 1;
    dim3 grid((unsigned)blocks, (unsigned)ctx->world_size);
    GatherRowsWide<<<grid, kThreads, 0, ctx->stream>>>(*x, static_cast<char*>(y->data), row_bytes);
  }
  RankBarrier<<<1, 32, 0, ctx->stream>>>(ctx->signal_pad, ctx->rank, ctx->world_size);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
