// Ulysses gather-heads / scatter-sequence, padding included, as peer loads: after a one-block
// barrier kernel (every peer's x is in place), one grid-stride kernel builds this rank's y
// directly. Position t of its shard and head block p come straight from rank p's x (position
// r * T + t), and positions past S are written as zeros without touching any peer, so the padding,
// the split, the all-to-all and torch.cat along the heads are one pass with no workspace.
//
// Units are visited peer-major starting from this rank's own heads (p = r, r + 1, ...), so that at
// any moment the ranks read from different peers. No end barrier: only peers' inputs are read and
// only this rank's output is written, and a peer's next call cannot pass its start barrier before
// this rank's kernel (ordered after this rank's barrier on ctx->stream) is done.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // remote loads in flight per thread

template <int N>
struct alignas(N) Unit {
  unsigned char b[N];
};

struct Args {
  const void* x[KF_MAX_RANKS];  // every rank's [B, S, c]
  uint32_t* pad[KF_MAX_RANKS];
  void* y;                 // this rank's [B, T, W, c]
  int64_t batch, s, t, c;  // c: one rank's heads at one position, in N-byte units
  int rank, world;
};

// Thread q signals peer q in slot `rank` of its pad and waits for peer q in slot q of this rank's
// pad; this rank's call count sits in its own pad past the W slots (zeroed before the first call).
__global__ void Arrive(Args a) {
  uint32_t* own = a.pad[a.rank];
  const uint32_t epoch = own[a.world] + 1;
  const int q = threadIdx.x;
  if (q < a.world && q != a.rank) {
    kf_signal(a.pad[q] + a.rank, epoch);
    kf_wait(own + q, epoch);
  }
  __syncthreads();
  if (threadIdx.x == 0) own[a.world] = epoch;
}

template <int N, typename I>
__global__ void __launch_bounds__(kThreads) Gather(Args a) {
  const I c = static_cast<I>(a.c), t = static_cast<I>(a.t), s = static_cast<I>(a.s);
  const I slab = static_cast<I>(a.batch) * t * c;  // what this rank takes from one peer
  const I total = slab * static_cast<I>(a.world);
  const I first_pos = static_cast<I>(a.rank) * t;
  for (I base = static_cast<I>(blockIdx.x) * kThreads * kUnroll + threadIdx.x; base < total;
       base += static_cast<I>(gridDim.x) * kThreads * kUnroll) {
    Unit<N> v[kUnroll];
    I at[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // all loads first, then all stores
      const I k = base + static_cast<I>(u) * kThreads;
      at[u] = total;
      if (k >= total) continue;
      const I q = k / slab, rest = k - q * slab, row = rest / c, j = rest - row * c;
      const I b = row / t, pos = first_pos + (row - b * t);
      int p = a.rank + static_cast<int>(q);
      if (p >= a.world) p -= a.world;
      at[u] = (row * static_cast<I>(a.world) + static_cast<I>(p)) * c + j;
      if (pos < s)
        v[u] = static_cast<const Unit<N>*>(a.x[p])[(b * s + pos) * c + j];
      else
        v[u] = Unit<N>{};  // padding
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (at[u] < total) static_cast<Unit<N>*>(a.y)[at[u]] = v[u];
    }
  }
}

template <int N>
int Launch(const Args& a, int sms, cudaStream_t stream) {
  const int64_t total = a.world * a.batch * a.t * a.c;
  int64_t blocks = (total + kThreads * kUnroll - 1) / (kThreads * kUnroll);
  if (blocks > 8 * static_cast<int64_t>(sms)) blocks = 8 * static_cast<int64_t>(sms);
  if (total < (int64_t{1} << 31))
    Gather<N, uint32_t><<<static_cast<int>(blocks), kThreads, 0, stream>>>(a);
  else
    Gather<N, int64_t><<<static_cast<int>(blocks), kThreads, 0, stream>>>(a);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& y = ctx->outputs[0];
  if (ctx->signal_pad.nbytes < sizeof(uint32_t) * (ctx->world_size + 1)) return 1;
  Args a = {};
  a.rank = ctx->rank;
  a.world = ctx->world_size;
  for (int q = 0; q < a.world; ++q) {
    a.x[q] = x.peers[q];
    a.pad[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
  }
  a.y = y.data;
  a.batch = x.shape[0];
  a.s = x.shape[1];
  a.t = y.shape[1];
  const int64_t run = x.shape[2] * x.shape[3] * static_cast<int64_t>(kf_dtype_size(x.dtype));
  Arrive<<<1, 32 * ((a.world + 31) / 32), 0, ctx->stream>>>(a);
  if (cudaGetLastError() != cudaSuccess) return 1;
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  // The widest unit that divides one rank's heads at one position (every run starts at a
  // multiple of it, in x and in y).
  const int unit = run % 16 == 0 ? 16 : run % 4 == 0 ? 4 : 1;
  a.c = run / unit;
  if (unit == 16) return Launch<16>(a, sms, ctx->stream);
  return unit == 4 ? Launch<4>(a, sms, ctx->stream) : Launch<1>(a, sms, ctx->stream);
}
