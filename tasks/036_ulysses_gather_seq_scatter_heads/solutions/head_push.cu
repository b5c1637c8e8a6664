// Ulysses gather-sequence / scatter-heads as one kernel of remote stores: rank r reads its own
// x once, and stores the heads of rank p at position r * T + t of rank p's y directly, so the pack
// (tensor_split), the all-to-all and the stacking along the sequence (torch.cat + unpadding) are
// one pass with no staging buffer. Positions past S (padding) are never sent. Stores to NVLink
// peers are posted writes, so a thread keeps several 16-byte stores in flight without waiting for
// a round trip, as a remote load would.
//
// The index space is ordered peer-major from this rank (peer r, r+1, ...), so that at any moment
// the ranks write to different peers.
//
// Synchronisation, per block b (the grid is the same on every rank):
//   start: block b tells block b of every peer "I am in this call" and waits for the same from
//          all of them; only then may it store into peers' y (a peer still in its previous call,
//          or not yet poisoned for this one, must not receive this call's values);
//   end:   after its stores, block b tells every peer "my part of your y is written" and waits
//          for all peers' block b; once every block of this rank has passed, its y is complete.
// The pad holds start slots [b * W + src], end slots [(G + b) * W + src] for a grid of G blocks,
// then this rank's own epoch per block (zeroed before the first call, one more per call).
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;  // 16-byte units per thread per step

template <int N>
struct alignas(N) Unit {
  unsigned char b[N];
};

struct Args {
  const void* x;          // this rank's [B, T, W, c] (heads grouped by destination)
  void* y[KF_MAX_RANKS];  // every rank's [B, S, c]
  uint32_t* pad[KF_MAX_RANKS];
  uint32_t* epochs;
  int64_t batch, t, s, c;  // c: N-byte units of one rank's heads at one position
  int rank, world;
};

__device__ __forceinline__ void Handshake(const Args& a, int64_t slot_base, uint32_t epoch) {
  __threadfence_system();  // every thread's stores to peers before the block's signal
  __syncthreads();
  const int peer = threadIdx.x;
  if (peer < a.world && peer != a.rank) {
    kf_signal(a.pad[peer] + slot_base + a.rank, epoch);
    kf_wait(a.pad[a.rank] + slot_base + peer, epoch);
  }
  __syncthreads();
}

template <int N, typename I>
__global__ void __launch_bounds__(kThreads) Push(Args a) {
  __shared__ uint32_t epoch;
  if (threadIdx.x == 0) epoch = a.epochs[blockIdx.x] + 1;
  __syncthreads();
  const uint32_t e = epoch;
  Handshake(a, static_cast<int64_t>(blockIdx.x) * a.world, e);

  const I c = static_cast<I>(a.c), t = static_cast<I>(a.t);
  const I slab = static_cast<I>(a.batch) * t * c;  // what this rank sends to one peer
  const I total = slab * static_cast<I>(a.world);
  const I stride = static_cast<I>(gridDim.x) * kThreads;
  const I first_pos = static_cast<I>(a.rank) * t;  // this rank's first sequence position
  const Unit<N>* x = static_cast<const Unit<N>*>(a.x);
  for (I base = static_cast<I>(blockIdx.x) * kThreads * kUnroll + threadIdx.x; base < total;
       base += stride * kUnroll) {
    Unit<N> v[kUnroll];
    Unit<N>* dst[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // all loads first, then all stores
      dst[u] = nullptr;
      const I k = base + static_cast<I>(u) * kThreads;
      if (k >= total) continue;
      const I q = k / slab, rest = k - q * slab, row = rest / c, j = rest - row * c;
      const I b = row / t, pos = first_pos + (row - b * t);
      if (pos >= static_cast<I>(a.s)) continue;  // padding: in no output
      int p = a.rank + static_cast<int>(q);
      if (p >= a.world) p -= a.world;
      v[u] = x[(row * static_cast<I>(a.world) + static_cast<I>(p)) * c + j];
      dst[u] = static_cast<Unit<N>*>(a.y[p]) + (b * static_cast<I>(a.s) + pos) * c + j;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (dst[u] != nullptr) *dst[u] = v[u];
    }
  }

  Handshake(a, (static_cast<int64_t>(gridDim.x) + blockIdx.x) * a.world, e);
  if (threadIdx.x == 0) a.epochs[blockIdx.x] = e;
}

// The same grid on every rank (shapes and GPU only). When ranks share one GPU every rank's grid
// must be resident at once (a spinning block starves the peer block it waits for).
int Blocks(const kf_ctx* ctx, int64_t total) {
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int64_t blocks = (total + kThreads * kUnroll - 1) / (kThreads * kUnroll);
  const int64_t cap = ctx->emulated ? sms / (2 * ctx->world_size) : sms;
  const int64_t pad = ctx->signal_pad.nbytes / (sizeof(uint32_t) * (2 * ctx->world_size + 1));
  if (blocks > cap) blocks = cap;
  if (blocks > pad) blocks = pad;
  return blocks < 1 ? 1 : static_cast<int>(blocks);
}

template <int N>
int Launch(Args a, const kf_ctx* ctx) {
  const int64_t total = a.world * a.batch * a.t * a.c;
  const int blocks = Blocks(ctx, total);
  a.epochs = static_cast<uint32_t*>(ctx->signal_pad.data) + 2 * int64_t{blocks} * a.world;
  if (total < (int64_t{1} << 31))
    Push<N, uint32_t><<<blocks, kThreads, 0, ctx->stream>>>(a);
  else
    Push<N, int64_t><<<blocks, kThreads, 0, ctx->stream>>>(a);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& y = ctx->outputs[0];
  Args a = {};
  a.x = x.data;
  a.rank = ctx->rank;
  a.world = ctx->world_size;
  for (int q = 0; q < a.world; ++q) {
    a.y[q] = y.peers[q];
    a.pad[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
  }
  a.batch = x.shape[0];
  a.t = x.shape[1];
  a.s = y.shape[1];
  const int64_t run = y.shape[2] * y.shape[3] * static_cast<int64_t>(kf_dtype_size(x.dtype));
  // The widest unit (16, 8, 4, 2 or 1 bytes) that divides one rank's heads at one position:
  // every run starts at a multiple of it in x and in y.
  int log_unit = 4;
  while (run % (int64_t{1} << log_unit) != 0) --log_unit;
  a.c = run >> log_unit;
  constexpr int (*kLaunch[])(Args, const kf_ctx*) = {Launch<1>, Launch<2>, Launch<4>, Launch<8>,
                                                     Launch<16>};
  return kLaunch[log_unit](a, ctx);
}
