// Ulysses all-to-all (scatter rows, gather columns) as one kernel of peer loads: after a start
// barrier (every peer's x is in place), rank r reads block r of every rank's x straight out of
// that rank's memory and stores each row at its final column offset in y, so the all-to-all and
// torch.cat's interleaving are one pass: no staging buffer, no second kernel.
//
// The index space is ordered peer-major from this rank's own block (peer r, r+1, ...), so that at
// any moment the ranks read from different peers. Only peers' inputs are read and only this rank's
// output is written, so no end barrier is needed: a peer's next call cannot pass its start
// barrier before this rank has finished this one.
//
// Barrier: block b of every rank handshakes with block b of every other rank through slot
// [b * W + src] of the receiver's pad; the epoch grows by one per call and is kept in this rank's
// own pad (zeroed before the first call), so back-to-back calls never see a stale flag.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;  // loads in flight per thread, to cover remote latency

template <int N>
struct alignas(N) Unit {
  unsigned char b[N];
};

struct Args {
  const void* x[KF_MAX_RANKS];  // every rank's x
  uint32_t* pad[KF_MAX_RANKS];
  void* y;
  uint32_t* epochs;
  int64_t m, c;  // rows per block, N-byte units per row
  int rank, world;
};

// Unit k of the work: peer q-th after this rank, row i of its block, unit j of the row.
template <int N, typename I>
__device__ __forceinline__ void Locate(const Args& a, I k, const Unit<N>** src, Unit<N>** dst) {
  const I c = static_cast<I>(a.c), slab = static_cast<I>(a.m) * c;
  const I q = k / slab, rest = k - q * slab, i = rest / c, j = rest - i * c;
  int p = a.rank + static_cast<int>(q);
  if (p >= a.world) p -= a.world;
  *src = static_cast<const Unit<N>*>(a.x[p]) +
         (static_cast<I>(a.rank) * static_cast<I>(a.m) + i) * c + j;
  *dst = static_cast<Unit<N>*>(a.y) + (i * static_cast<I>(a.world) + static_cast<I>(p)) * c + j;
}

template <int N, typename I>
__global__ void __launch_bounds__(kThreads) Pull(Args a) {
  __shared__ uint32_t epoch;
  if (threadIdx.x == 0) epoch = a.epochs[blockIdx.x] + 1;
  __syncthreads();
  const int peer = threadIdx.x;
  if (peer < a.world && peer != a.rank) {
    kf_signal(a.pad[peer] + blockIdx.x * a.world + a.rank, epoch);
    kf_wait(a.pad[a.rank] + blockIdx.x * a.world + peer, epoch);
  }
  __syncthreads();

  const I total = static_cast<I>(a.world) * a.m * a.c;
  const I stride = static_cast<I>(gridDim.x) * kThreads;
  for (I base = static_cast<I>(blockIdx.x) * kThreads * kUnroll + threadIdx.x; base < total;
       base += stride * kUnroll) {
    Unit<N> v[kUnroll];
    Unit<N>* dst[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const I k = base + static_cast<I>(u) * kThreads;
      if (k < total) {
        const Unit<N>* src;
        Locate<N, I>(a, k, &src, &dst[u]);
        v[u] = *src;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + static_cast<I>(u) * kThreads < total) *dst[u] = v[u];
    }
  }
  if (threadIdx.x == 0) a.epochs[blockIdx.x] = epoch;
}

// The grid: the same on every rank (it depends only on the shapes and the GPU), so block b pairs
// up everywhere. When ranks share one GPU every rank's grid must be resident at once (a spinning
// block starves the peer block it waits for); the pad holds W slots and one epoch per block.
int Blocks(const kf_ctx* ctx, int64_t total) {
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int64_t blocks = (total + kThreads * kUnroll - 1) / (kThreads * kUnroll);
  const int64_t cap = ctx->emulated ? sms / (2 * ctx->world_size) : sms;
  const int64_t pad = ctx->signal_pad.nbytes / (sizeof(uint32_t) * (ctx->world_size + 1));
  if (blocks > cap) blocks = cap;
  if (blocks > pad) blocks = pad;
  return blocks < 1 ? 1 : static_cast<int>(blocks);
}

template <int N>
int Launch(const Args& a, int blocks, cudaStream_t s) {
  if (a.world * a.m * a.c < (int64_t{1} << 31))
    Pull<N, uint32_t><<<blocks, kThreads, 0, s>>>(a);
  else
    Pull<N, int64_t><<<blocks, kThreads, 0, s>>>(a);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& y = ctx->outputs[0];
  Args a = {};
  a.world = ctx->world_size;
  a.rank = ctx->rank;
  for (int q = 0; q < a.world; ++q) {
    a.x[q] = x.peers[q];
    a.pad[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
  }
  a.y = y.data;
  a.m = y.shape[0];
  const int64_t row = x.shape[1] * static_cast<int64_t>(kf_dtype_size(x.dtype));
  // The widest unit that divides a row: every block row starts at a multiple of it.
  const int unit = row % 16 == 0 ? 16 : row % 8 == 0 ? 8 : row % 4 == 0 ? 4 : row % 2 == 0 ? 2 : 1;
  a.c = row / unit;
  const int blocks = Blocks(ctx, a.world * a.m * a.c);
  // This rank's epochs live in its own pad, past every block's W slots.
  a.epochs = static_cast<uint32_t*>(ctx->signal_pad.data) + blocks * a.world;
  switch (unit) {
    case 16:
      return Launch<16>(a, blocks, ctx->stream);
    case 8:
      return Launch<8>(a, blocks, ctx->stream);
    case 4:
      return Launch<4>(a, blocks, ctx->stream);
    case 2:
      return Launch<2>(a, blocks, ctx->stream);
    default:
      return Launch<1>(a, blocks, ctx->stream);
  }
}
