// RL weight refit as a one-writer-all-readers broadcast fused with the unpack: a scatter
// then an all-gather through peer stores.
//
// The parameters (in the trainer's order, [0, P)) are split into W-1 shares, one per non-root
// rank, and every share into G slices, one per CTA. CTA b of non-root rank q pulls slice b of
// its share from the root's params over NVLink and stores it straight into the weights of
// every non-root rank (its own included), at the engine's offsets: the root's link carries
// each byte once, every other rank receives each byte once, and no staging buffer or unpack
// pass is needed. The root copies its own weights locally. CTA b of every rank first says
// "my weights are writable" to CTA b of every rank and waits to hear it from all (the harness
// fills outputs before each call), and at the end says "my slices are written" and waits for
// all, so that no rank returns while a peer still writes into it.
#include <cuda_runtime.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;

struct Args {
  const uint16_t* src;    // the root's params (a peer pointer, or this rank's own on the root)
  uint16_t* dst[KF_MAX_RANKS];  // the weights this rank writes: every non-root's, or its own
  int ndst;
  const int64_t* table;   // [nt, 3]: (src, dst, n), src increasing, back to back from 0
  int nt;
  int64_t p, share, slice;
  int first_share, shares;  // this rank copies slice b of shares first .. first + shares - 1
  uint32_t* pad_peers[KF_MAX_RANKS];
  int rank, world;
};

__device__ void Handshake(const Args& a, int phase, uint32_t e) {
  __syncthreads();
  if (threadIdx.x < a.world) {
    const int slot = (phase * gridDim.x + blockIdx.x) * KF_MAX_RANKS;
    __threadfence_system();
    kf_signal(a.pad_peers[threadIdx.x] + slot + a.rank, e);
    kf_wait(a.pad_peers[a.rank] + slot + threadIdx.x, e);
  }
  __syncthreads();
}

// Copies [lo, hi) of the trainer's index space to every destination, shifted by delta.
__device__ void CopyPiece(const Args& a, int64_t lo, int64_t hi, int64_t delta) {
  if (delta % 8 == 0) {
    const int64_t vlo = (lo + 7) / 8 * 8 < hi ? (lo + 7) / 8 * 8 : hi;
    const int64_t vhi = vlo + (hi - vlo) / 8 * 8;
    for (int64_t i = lo + threadIdx.x; i < vlo; i += kThreads) {
      const uint16_t v = a.src[i];
      for (int d = 0; d < a.ndst; ++d) a.dst[d][i + delta] = v;
    }
    const uint4* s4 = reinterpret_cast<const uint4*>(a.src + vlo);
    const int64_t nv = (vhi - vlo) / 8, shift = (vlo + delta) / 8;
    for (int64_t v = threadIdx.x; v < nv; v += kUnroll * kThreads) {
      uint4 r[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (v + u * kThreads < nv) r[u] = s4[v + u * kThreads];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (v + u * kThreads >= nv) continue;
        for (int d = 0; d < a.ndst; ++d)
          reinterpret_cast<uint4*>(a.dst[d])[shift + v + u * kThreads] = r[u];
      }
    }
    for (int64_t i = vhi + threadIdx.x; i < hi; i += kThreads) {
      const uint16_t v = a.src[i];
      for (int d = 0; d < a.ndst; ++d) a.dst[d][i + delta] = v;
    }
  } else {
    for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) {
      const uint16_t v = a.src[i];
      for (int d = 0; d < a.ndst; ++d) a.dst[d][i + delta] = v;
    }
  }
}

// Copies [lo, hi) tensor piece by tensor piece.
__device__ void CopyRange(const Args& a, int64_t lo, int64_t hi) {
  if (lo >= hi) return;
  int t = 0, top = a.nt - 1;  // the last row whose src <= lo
  while (t < top) {
    const int mid = (t + top + 1) / 2;
    if (a.table[3 * mid] <= lo) t = mid; else top = mid - 1;
  }
  for (; t < a.nt && a.table[3 * t] < hi; ++t) {
    const int64_t s = a.table[3 * t], d = a.table[3 * t + 1], n = a.table[3 * t + 2];
    const int64_t plo = lo > s ? lo : s, phi = hi < s + n ? hi : s + n;
    if (plo < phi) CopyPiece(a, plo, phi, d - s);
  }
}

__global__ void __launch_bounds__(kThreads) Refit(Args a, uint32_t* epochs) {
  const uint32_t e = epochs[blockIdx.x] + 1;
  Handshake(a, 0, e);
  for (int j = a.first_share; j < a.first_share + a.shares; ++j) {
    const int64_t s0 = j * a.share, s1 = min(a.p, s0 + a.share);
    const int64_t lo = min(s1, s0 + blockIdx.x * a.slice);
    CopyRange(a, lo, min(s1, lo + a.slice));
  }
  Handshake(a, 1, e);
  if (threadIdx.x == 0) epochs[blockIdx.x] = e;
}

struct State {
  uint32_t* epoch;
  int ctas;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  State* st = new State;
  // The same grid on every rank (CTA b pairs with CTA b of the peers); few CTAs when ranks
  // share a GPU, so that all ranks' CTAs are resident together.
  st->ctas = ctx->emulated ? 4 : ctx->gpu.sm_count;
  if (2ull * st->ctas * KF_MAX_RANKS * sizeof(uint32_t) > ctx->signal_pad.nbytes) return 1;
  if (cudaMalloc(&st->epoch, st->ctas * sizeof(uint32_t)) != cudaSuccess) return 1;
  if (cudaMemset(st->epoch, 0, st->ctas * sizeof(uint32_t)) != cudaSuccess) return 1;
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor& params = *kf_input(ctx, "params");
  const kf_tensor& tensors = *kf_input(ctx, "tensors");
  const kf_tensor& weights = *kf_output(ctx, "weights");
  const int root = static_cast<int>(kf_param(ctx, "root", 0));
  const int w = ctx->world_size;
  Args a;
  a.rank = ctx->rank;
  a.world = w;
  a.p = params.numel;
  a.table = static_cast<const int64_t*>(tensors.data);
  a.nt = static_cast<int>(tensors.shape[0]);
  a.src = static_cast<const uint16_t*>(params.peers[root]);
  const int m = w - 1;  // shares, one per non-root rank
  a.share = ((a.p + m - 1) / m + 7) / 8 * 8;
  a.slice = ((a.share + st->ctas - 1) / st->ctas + 7) / 8 * 8;
  a.ndst = 0;
  if (ctx->rank == root) {
    a.dst[a.ndst++] = static_cast<uint16_t*>(weights.data);
    a.first_share = 0;
    a.shares = m;
  } else {
    for (int r = 0; r < w; ++r)
      if (r != root) a.dst[a.ndst++] = static_cast<uint16_t*>(weights.peers[r]);
    a.first_share = ctx->rank < root ? ctx->rank : ctx->rank - 1;
    a.shares = 1;
  }
  for (int r = 0; r < w; ++r) a.pad_peers[r] = static_cast<uint32_t*>(ctx->signal_pad.peers[r]);
  Refit<<<st->ctas, kThreads, 0, ctx->stream>>>(a, st->epoch);
  return cudaGetLastError() != cudaSuccess;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  cudaFree(st->epoch);
  delete st;
  return 0;
}
