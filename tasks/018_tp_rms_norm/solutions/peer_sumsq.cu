// TP RMSNorm in one kernel: the sum-of-squares all-reduce is done by peer loads
// inside the norm kernel, with no separate collective.
//   1. Block b computes the local fp32 sum of squares of its rows (b, b+G, ...)
//      and stores them in this rank's workspace.
//   2. Block b handshakes with block b of every peer (signal pad, per-block
//      epochs): every rank's partials for these rows are then in place.
//   3. Block b loads the W partials of each of its rows from the peers'
//      workspaces (all loads in flight at once), then normalises its rows.
// Rows are assigned to blocks the same way on every rank (the grid depends only
// on W and the GPU), so block b reads only partials that block b of each peer
// wrote. The partials are double-buffered by epoch parity: a rank starts
// writing call n+2's partials only after every peer signalled call n+1, which
// each peer does after its call-n reads, so no read is overwritten.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

struct PeerFloats {
  float* p[KF_MAX_RANKS];
};
struct PeerPads {
  uint32_t* p[KF_MAX_RANKS];
};

struct State {
  uint32_t* epochs = nullptr;  // calls made by each block (device memory)
  int blocks = 0;
};

// Loads and stores through 16-byte vectors of T where the row allows.
template <typename T>
struct Elem;
template <>
struct Elem<float> {
  static constexpr int kPerVec = 4;
  __device__ static float Get(float v) { return v; }
  __device__ static float Put(float v) { return v; }
};
template <>
struct Elem<__nv_bfloat16> {
  static constexpr int kPerVec = 8;
  __device__ static float Get(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 Put(float v) { return __float2bfloat16_rn(v); }
};

__device__ float BlockSum(float v) {
  __shared__ float partial[kThreads / 32];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int i = 0; i < kThreads / 32; ++i) s += partial[i];
    total = s;
  }
  __syncthreads();
  const float t = total;
  __syncthreads();
  return t;
}

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

template <typename T>
__global__ void __launch_bounds__(kThreads)
    FusedRmsNorm(const T* h, const T* w, T* y, int64_t m, int64_t n, bool vec, float inv_count,
                 float eps, PeerFloats ws, PeerPads pads, uint32_t* epochs, int rank, int world) {
  using E = Elem<T>;
  constexpr int V = E::kPerVec;
  __shared__ uint32_t epoch_sh;
  if (threadIdx.x == 0) epoch_sh = epochs[blockIdx.x] + 1;
  __syncthreads();
  const uint32_t epoch = epoch_sh;
  const int64_t parity = epoch & 1;
  float* mine = ws.p[rank] + parity * m;
  float* totals = ws.p[rank] + 2 * m;  // this rank's own scratch, never read by peers
  const int64_t units = vec ? n / V : 0;

  // 1. Local sums of squares.
  for (int64_t row = blockIdx.x; row < m; row += gridDim.x) {
    const T* x = h + row * n;
    float s = 0.f;
    for (int64_t u = threadIdx.x; u < units; u += kThreads) {
      const uint4 raw = reinterpret_cast<const uint4*>(x)[u];
      const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float f = E::Get(v[k]);
        s += f * f;
      }
    }
    for (int64_t c = units * V + threadIdx.x; c < n; c += kThreads) {
      const float f = E::Get(x[c]);
      s += f * f;
    }
    s = BlockSum(s);
    if (threadIdx.x == 0) mine[row] = s;
  }

  // 2. Every peer's partials for these rows are written.
  BlockBarrier(pads, rank, world, epoch);

  // 3a. Totals of this block's rows: every peer load issued at once.
  for (int64_t k = threadIdx.x;; k += kThreads) {
    const int64_t row = blockIdx.x + k * gridDim.x;
    if (row >= m) break;
    float t = 0.f;
    for (int p = 0; p < world; ++p) t += ws.p[p][parity * m + row];
    totals[row] = t;
  }
  __syncthreads();

  // 3b. Normalise.
  for (int64_t row = blockIdx.x; row < m; row += gridDim.x) {
    const float inv = rsqrtf(totals[row] * inv_count + eps);
    const T* x = h + row * n;
    T* out = y + row * n;
    for (int64_t u = threadIdx.x; u < units; u += kThreads) {
      const uint4 rx = reinterpret_cast<const uint4*>(x)[u];
      const uint4 rw = reinterpret_cast<const uint4*>(w)[u];
      const T* vx = reinterpret_cast<const T*>(&rx);
      const T* vw = reinterpret_cast<const T*>(&rw);
      uint4 ro;
      T* vo = reinterpret_cast<T*>(&ro);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const T normed = E::Put(E::Get(vx[k]) * inv);
        vo[k] = E::Put(E::Get(vw[k]) * E::Get(normed));
      }
      reinterpret_cast<uint4*>(out)[u] = ro;
    }
    for (int64_t c = units * V + threadIdx.x; c < n; c += kThreads) {
      const T normed = E::Put(E::Get(x[c]) * inv);
      out[c] = E::Put(E::Get(w[c]) * E::Get(normed));
    }
  }
  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch;
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <typename T>
int Run(kf_ctx* ctx, const State* st) {
  const kf_tensor* h = kf_input(ctx, "h");
  const kf_tensor* w = kf_input(ctx, "w");
  kf_tensor* y = kf_output(ctx, "y");
  if (h == nullptr || w == nullptr || y == nullptr || h->ndim != 2) return 1;
  const int64_t m = h->shape[0], n = h->shape[1];
  if (ctx->workspace.nbytes < 3 * m * sizeof(float)) return 1;
  constexpr int V = Elem<T>::kPerVec;
  // Every row starts 16-byte aligned only when a row is a whole number of vectors.
  const bool vec = n % V == 0 && Aligned16(h->data) && Aligned16(w->data) && Aligned16(y->data);
  PeerFloats ws;
  PeerPads pads;
  for (int q = 0; q < KF_MAX_RANKS; ++q) {
    ws.p[q] = q < ctx->world_size ? static_cast<float*>(ctx->workspace.peers[q]) : nullptr;
    pads.p[q] = q < ctx->world_size ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
  }
  const float eps = static_cast<float>(kf_param(ctx, "eps", 1e-5));
  const float inv_count = 1.0f / static_cast<float>(n * ctx->world_size);
  FusedRmsNorm<T><<<st->blocks, kThreads, 0, ctx->stream>>>(
      static_cast<const T*>(h->data), static_cast<const T*>(w->data), static_cast<T*>(y->data), m,
      n, vec, inv_count, eps, ws, pads, st->epochs, ctx->rank, ctx->world_size);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size > kThreads) return 1;
  // Same grid on every rank; when ranks share one GPU every rank's grid must be
  // resident at once (a spinning block would starve the peer it waits for).
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int blocks = ctx->emulated ? sms / (2 * ctx->world_size) : 2 * sms;
  if (blocks < 1) blocks = 1;
  const size_t pad_blocks = ctx->signal_pad.nbytes / (sizeof(uint32_t) * ctx->world_size);
  if (static_cast<size_t>(blocks) > pad_blocks) blocks = static_cast<int>(pad_blocks);
  State* st = new State;
  st->blocks = blocks;
  if (cudaMalloc(&st->epochs, sizeof(uint32_t) * blocks) != cudaSuccess ||
      cudaMemsetAsync(st->epochs, 0, sizeof(uint32_t) * blocks, ctx->stream) != cudaSuccess ||
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
  switch (ctx->inputs[0].dtype) {
    case KF_BF16:
      return Run<__nv_bfloat16>(ctx, st);
    case KF_F32:
      return Run<float>(ctx, st);
    default:
      return 2;
  }
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
