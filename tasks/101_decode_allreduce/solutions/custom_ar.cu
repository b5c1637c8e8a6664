// Custom all-reduce for decode-sized messages, the way vLLM's custom all-reduce
// chooses: one-shot below a crossover, two-shot above it.
//
//   one-shot (1 barrier): every rank reads the whole of every peer's x over
//     NVLink, sums in fp32 in rank order 0..W-1 (so every rank computes the same
//     bits) and writes its own y. Each rank pulls (W-1) N elements.
//   two-shot (2 barriers): rank r reduces chunk r of every peer's x into its own
//     workspace (a reduce-scatter), then, after a barrier, copies chunk p from
//     rank p's workspace into its y (an all-gather). Each rank pulls
//     2 (W-1)/W N elements: it wins once bytes, not latency, dominate.
// Crossover as vLLM's: W = 2 always one-shot; W <= 4 two-shot from 512 KiB;
// W = 8 two-shot from 256 KiB.
//
// Barrier: block b of every rank signals block b of every peer through slot
// [b * W + src] of the receiver's pad, with an epoch per block kept in device
// memory (the pad is zeroed only before setup, so epochs make back-to-back calls
// safe). Per-block barriers suffice for two-shot because unit u of a chunk is
// handled by the same block in both stages on every rank (every rank launches
// the same grid over the same chunk length).
//
// No end barrier: one-shot reads only peers' inputs, which the harness leaves
// alone until every rank has returned. Two-shot stages through the workspace,
// which only the next call overwrites, and a rank's next call cannot pass its
// start barrier before every peer has finished this call (a peer enters its
// next kernel only after this one completed on its stream).
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 512;
constexpr int kMaxWorld = 8;   // the task's largest world size; loads are unrolled to it
constexpr int kBlockLimit = 36;  // vLLM's block limit: more blocks only contend on NVLink
constexpr int kV = 8;           // bf16 per 16-byte vector

using bf16 = __nv_bfloat16;

struct PeerPtrs {
  const bf16* p[kMaxWorld];
};
struct PeerPads {
  uint32_t* p[kMaxWorld];
};

struct State {
  uint32_t* epochs = nullptr;  // one barrier epoch per block (device memory)
  int max_blocks = 0;
};

// Block b of this rank meets block b of every peer; thread p talks to peer p.
// The leading __syncthreads puts the block's earlier stores before the release
// in kf_signal; the trailing one extends kf_wait's acquire to the whole block.
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

__device__ __forceinline__ void Unpack(const uint4& v, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

__device__ __forceinline__ uint4 Pack(const float* f) {
  uint4 v;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

// dst[e] = sum over ranks q of x_q[off + e] for the elements of unit u of a
// range of n elements: one 16-byte vector per rank when the unit is whole and
// the pointers aligned, element by element otherwise (tails, odd N).
__device__ __forceinline__ void SumUnit(const PeerPtrs& x, int64_t off, bf16* dst, int64_t u,
                                        int64_t n, bool vec, int world) {
  const int64_t e0 = u * kV;
  if (vec && e0 + kV <= n) {
    uint4 v[kMaxWorld];
#pragma unroll
    for (int q = 0; q < kMaxWorld; ++q) {
      if (q < world) v[q] = *reinterpret_cast<const uint4*>(x.p[q] + off + e0);
    }
    float acc[kV];
    Unpack(v[0], acc);
#pragma unroll
    for (int q = 1; q < kMaxWorld; ++q) {
      if (q < world) {
        float f[kV];
        Unpack(v[q], f);
#pragma unroll
        for (int k = 0; k < kV; ++k) acc[k] += f[k];
      }
    }
    *reinterpret_cast<uint4*>(dst + e0) = Pack(acc);
  } else {
    const int64_t e1 = e0 + kV < n ? e0 + kV : n;
    for (int64_t e = e0; e < e1; ++e) {
      float acc = 0.f;
      for (int q = 0; q < world; ++q) acc += __bfloat162float(x.p[q][off + e]);
      dst[e] = __float2bfloat16_rn(acc);
    }
  }
}

__device__ __forceinline__ void CopyUnit(const bf16* src, bf16* dst, int64_t u, int64_t n,
                                         bool vec) {
  const int64_t e0 = u * kV;
  if (vec && e0 + kV <= n) {
    *reinterpret_cast<uint4*>(dst + e0) = *reinterpret_cast<const uint4*>(src + e0);
  } else {
    const int64_t e1 = e0 + kV < n ? e0 + kV : n;
    for (int64_t e = e0; e < e1; ++e) dst[e] = src[e];
  }
}

__device__ __forceinline__ int64_t ChunkLen(int64_t n, int64_t chunk, int c) {
  const int64_t left = n - c * chunk;
  return left <= 0 ? 0 : (left < chunk ? left : chunk);
}

__global__ void __launch_bounds__(kThreads)
    OneShot(PeerPtrs x, bf16* y, int64_t n, bool vec, PeerPads pads, uint32_t* epochs, int rank,
            int world) {
  const uint32_t epoch = epochs[blockIdx.x] + 1;  // read before the barrier's __syncthreads
  BlockBarrier(pads, rank, world, epoch);          // every peer's x is in place
  const int64_t units = (n + kV - 1) / kV;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units;
       u += stride)
    SumUnit(x, 0, y, u, n, vec, world);
  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch;
}

__global__ void __launch_bounds__(kThreads)
    TwoShot(PeerPtrs x, PeerPtrs stage, bf16* own_stage, bf16* y, int64_t n, int64_t chunk,
            bool vec, PeerPads pads, uint32_t* epochs, int rank, int world) {
  const uint32_t epoch = epochs[blockIdx.x];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;

  BlockBarrier(pads, rank, world, epoch + 1);  // every peer's x is in place
  // Stage 1: reduce chunk `rank` of every x into this rank's staging buffer.
  {
    const int64_t len = ChunkLen(n, chunk, rank);
    const int64_t units = (len + kV - 1) / kV;
    for (int64_t u = first; u < units; u += stride)
      SumUnit(x, rank * chunk, own_stage, u, len, vec, world);
  }
  BlockBarrier(pads, rank, world, epoch + 2);  // every rank's chunk is reduced
  // Stage 2: gather chunk p from rank p's staging buffer, own chunk first, then
  // the next ranks in turn so that the ranks spread their reads over the peers.
  for (int k = 0; k < world; ++k) {
    const int p = (rank + k) % world;
    const int64_t len = ChunkLen(n, chunk, p);
    const int64_t units = (len + kV - 1) / kV;
    for (int64_t u = first; u < units; u += stride)
      CopyUnit(stage.p[p], y + p * chunk, u, len, vec);
  }
  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch + 2;
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

bool UseTwoShot(int world, int64_t bytes) {
  if (world <= 2) return false;
  if (world <= 4) return bytes >= 512 * 1024;
  return bytes >= 256 * 1024;
}

int Blocks(int64_t units, const State* st) {
  int64_t b = (units + kThreads - 1) / kThreads;
  if (b > st->max_blocks) b = st->max_blocks;
  return static_cast<int>(b < 1 ? 1 : b);
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size < 1 || ctx->world_size > kMaxWorld) return 1;
  const kf_tensor* x = kf_input(ctx, "x");
  const kf_tensor* y = kf_output(ctx, "y");
  if (x == nullptr || y == nullptr || x->dtype != KF_BF16 || y->numel != x->numel) return 1;
  // Co-residency: when ranks share one GPU, each rank's grid must leave room for
  // the others' (a spinning grid that fills the GPU starves the peer it waits
  // for). The signal pad must hold W slots per block.
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int max_blocks = ctx->emulated ? sms / (2 * ctx->world_size) : kBlockLimit;
  if (max_blocks > kBlockLimit) max_blocks = kBlockLimit;
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
  const kf_tensor* xt = kf_input(ctx, "x");
  kf_tensor* yt = kf_output(ctx, "y");
  const int world = ctx->world_size;
  const int64_t n = xt->numel;

  PeerPtrs x{}, stage{};
  PeerPads pads{};
  bool vec = Aligned16(yt->data) && Aligned16(ctx->workspace.data);
  for (int q = 0; q < world; ++q) {
    x.p[q] = static_cast<const bf16*>(xt->peers[q]);
    stage.p[q] = static_cast<const bf16*>(ctx->workspace.peers[q]);
    pads.p[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
    vec = vec && Aligned16(x.p[q]) && Aligned16(stage.p[q]);
  }
  bf16* y = static_cast<bf16*>(yt->data);
  // The choice and the grid depend only on values every rank shares (N, W, the
  // GPU), so every rank takes the same path and block b exists on every rank.
  if (!UseTwoShot(world, n * static_cast<int64_t>(sizeof(bf16)))) {
    OneShot<<<Blocks((n + kV - 1) / kV, st), kThreads, 0, ctx->stream>>>(
        x, y, n, vec, pads, st->epochs, ctx->rank, world);
  } else {
    // Whole vectors per chunk keep every chunk start 16-byte aligned.
    const int64_t chunk = ((n + world - 1) / world + kV - 1) / kV * kV;
    if (ctx->workspace.nbytes < static_cast<size_t>(chunk) * sizeof(bf16)) return 1;
    TwoShot<<<Blocks(chunk / kV, st), kThreads, 0, ctx->stream>>>(
        x, stage, static_cast<bf16*>(ctx->workspace.data), y, n, chunk, vec, pads, st->epochs,
        ctx->rank, world);
  }
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
