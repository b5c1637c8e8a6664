// Gather by peer reads: after a start barrier (every peer's x is ready) the root
// copies x_p from rank p's buffer into row p of its own y, starting with its own
// row and then the next ranks. Every other rank copies its own x into its own
// y[1, N] in the same kernel. Only peers' inputs are read and no peer's output is
// written, so no end barrier is needed: a peer's next call cannot pass its start
// barrier before the root has finished this one.
//
// Barrier: per-block handshake through the signal pad (slot [b * W + src] of the
// receiver's pad) with per-block epochs kept in device memory, so back-to-back
// calls never see a stale flag. Every rank launches the same grid (computed from
// W * N, not from its own share of the work) so that the blocks pair up. The
// root comes from the task's param, never assumed to be rank 0.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 512;

struct PeerPads {
  uint32_t* p[KF_MAX_RANKS];
};

// The byte ranges one rank copies in one call: dst is this rank's, src may be a peer's.
struct Segments {
  const char* src[KF_MAX_RANKS];
  char* dst[KF_MAX_RANKS];
  int64_t bytes[KF_MAX_RANKS];
  int count;
};

// Kept in ctx->user between calls.
struct State {
  uint32_t* epochs = nullptr;  // one barrier epoch per block (device memory)
  int max_blocks = 0;
};

// Block b of this rank meets block b of every peer. Thread p talks to peer p.
// The leading __syncthreads puts the whole block's earlier stores before the
// release in kf_signal; the trailing one extends kf_wait's acquire to the block.
__device__ __forceinline__ void BlockBarrier(const PeerPads& pads, int rank, int world,
                                             uint32_t epoch) {
  __syncthreads();
  const int peer = threadIdx.x;
  if (peer < world && peer != rank) {
    kf_signal(pads.p[peer] + blockIdx.x * world + rank, epoch);
    kf_wait(pads.p[rank] + blockIdx.x * world + peer, epoch);
  }
  __syncthreads();
}

// Copies n bytes in units of U, four units in flight per thread to cover the
// latency of remote reads; the bytes past the last whole unit go one by one.
template <typename U>
__device__ __forceinline__ void CopyAs(char* dst, const char* src, int64_t n, int64_t first,
                                       int64_t stride) {
  constexpr int kUnroll = 4;
  const int64_t units = n / static_cast<int64_t>(sizeof(U));
  U* d = reinterpret_cast<U*>(dst);
  const U* s = reinterpret_cast<const U*>(src);
  for (int64_t i = first; i < units; i += kUnroll * stride) {
    U v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      if (i + k * stride < units) v[k] = s[i + k * stride];
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      if (i + k * stride < units) d[i + k * stride] = v[k];
    }
  }
  for (int64_t i = units * static_cast<int64_t>(sizeof(U)) + first; i < n; i += stride) dst[i] = src[i];
}

// Rows at odd element offsets are not 16-byte aligned: use the widest access
// that both pointers allow.
__device__ __forceinline__ void CopyBytes(char* dst, const char* src, int64_t n, int64_t first,
                                          int64_t stride) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src);
  if ((a & 15) == 0) {
    CopyAs<uint4>(dst, src, n, first, stride);
  } else if ((a & 7) == 0) {
    CopyAs<uint2>(dst, src, n, first, stride);
  } else if ((a & 3) == 0) {
    CopyAs<uint32_t>(dst, src, n, first, stride);
  } else if ((a & 1) == 0) {
    CopyAs<uint16_t>(dst, src, n, first, stride);
  } else {
    CopyAs<uint8_t>(dst, src, n, first, stride);
  }
}

__global__ void __launch_bounds__(kThreads)
    PullKernel(Segments segs, PeerPads pads, uint32_t* epochs, int rank, int world) {
  __shared__ uint32_t last_epoch;
  if (threadIdx.x == 0) last_epoch = epochs[blockIdx.x];
  __syncthreads();
  const uint32_t epoch = last_epoch + 1;

  BlockBarrier(pads, rank, world, epoch);  // every peer's x is ready

  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int s = 0; s < segs.count; ++s) CopyBytes(segs.dst[s], segs.src[s], segs.bytes[s], first, stride);

  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch;
}

// The task's root param, or -1 when it is missing or not a rank.
[[maybe_unused]] int Root(const kf_ctx* ctx) {
  const double r = kf_param(ctx, "root", -1.0);
  const int root = static_cast<int>(r);
  return (root == r && root >= 0 && root < ctx->world_size) ? root : -1;
}

[[maybe_unused]] int64_t ElemBytes(const kf_tensor& t) { return static_cast<int64_t>(kf_dtype_size(t.dtype)); }

bool ShapesMatch(const kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& y = ctx->outputs[0];
  const int rows = ctx->rank == Root(ctx) ? ctx->world_size : 1;
  return Root(ctx) >= 0 && y.dtype == x.dtype && y.numel == x.numel * rows;
}

// Root: y[p] <- x_p for every p; every other rank: its own y[1, N] <- x.
int BuildSegments(kf_ctx* ctx, Segments* s, int64_t* grid_bytes) {
  const int root = Root(ctx);
  if (root < 0) return 1;
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  const int world = ctx->world_size;
  const int64_t row = x.numel * ElemBytes(x);
  s->count = 0;
  if (ctx->rank == root) {
    for (int k = 0; k < world; ++k) {
      const int p = (root + k) % world;
      s->src[k] = static_cast<const char*>(x.peers[p]);
      s->dst[k] = static_cast<char*>(y.data) + p * row;
      s->bytes[k] = row;
    }
    s->count = world;
  } else {
    s->src[0] = static_cast<const char*>(x.data);
    s->dst[0] = static_cast<char*>(y.data);
    s->bytes[0] = row;
    s->count = 1;
  }
  *grid_bytes = row * world;
  return 0;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size < 1 || ctx->world_size > KF_MAX_RANKS) return 1;
  if (ctx->num_inputs < 1 || ctx->num_outputs < 1) return 1;
  if (!ShapesMatch(ctx)) return 1;

  // Co-residency: when ranks share one GPU, each rank's grid must leave room for
  // the others' (a spinning grid that fills the GPU starves the peer it waits
  // for). The signal pad must hold W slots per block.
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int max_blocks = ctx->emulated ? sms / (2 * ctx->world_size) : sms;
  if (max_blocks < 1) max_blocks = 1;
  const size_t pad_blocks = ctx->signal_pad.nbytes / (sizeof(uint32_t) * ctx->world_size);
  if (pad_blocks < static_cast<size_t>(max_blocks)) max_blocks = static_cast<int>(pad_blocks);
  if (max_blocks < 1) return 1;

  State* st = new State;
  st->max_blocks = max_blocks;
  if (cudaMalloc(&st->epochs, sizeof(uint32_t) * max_blocks) != cudaSuccess ||
      cudaMemsetAsync(st->epochs, 0, sizeof(uint32_t) * max_blocks, ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
    cudaFree(st->epochs);
    delete st;
    return 1;
  }
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  const State* st = static_cast<const State*>(ctx->user);
  if (st == nullptr) return 1;
  Segments segs = {};
  int64_t grid_bytes = 0;
  if (BuildSegments(ctx, &segs, &grid_bytes) != 0) return 1;

  PeerPads pads;
  for (int q = 0; q < KF_MAX_RANKS; ++q) {
    pads.p[q] = q < ctx->world_size ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
  }
  // grid_bytes is the same on every rank, so block b exists on every rank and
  // the per-block barriers pair up.
  int64_t blocks = (grid_bytes / 16 + kThreads - 1) / kThreads;
  if (blocks > st->max_blocks) blocks = st->max_blocks;
  if (blocks < 1) blocks = 1;
  PullKernel<<<static_cast<int>(blocks), kThreads, 0, ctx->stream>>>(segs, pads, st->epochs,
                                                                     ctx->rank, ctx->world_size);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (cudaFree(st->epochs) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
