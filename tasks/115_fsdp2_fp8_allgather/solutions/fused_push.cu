// FSDP2 float8 all-gather with dynamic scales in one kernel: the amax all-reduce and the
// fp8 all-gather fused, through peer stores.
//
//   A. Every CTA folds the max |w| of its part of every weight's local real rows into this
//      rank's amax slots (atomicMax on the bits). The last CTA to finish (a counter) stores
//      the NT amaxes into every rank's workspace, row `rank`, and raises flag A on every rank.
//   B. Every CTA waits for flag A of all ranks, takes each weight's max over the W rows and
//      its scale, quantizes its part of the local shards and stores the fp8 bytes straight
//      into every rank's weights_fp8, at their final offsets (no flat buffer, no copy-out).
//      The last CTA to finish raises flag B on every rank and waits for all ranks' flag B,
//      so that no rank returns while a peer still writes into it.
// Flag A also tells a peer that this rank's outputs are ready to be written (the harness fills
// outputs before each call). Amax slots and rows alternate by call parity.
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 512;
constexpr int kMaxTensors = 1024;

struct Args {
  const float* shards;
  const int64_t* table;  // [nt, 4]: rows, cols, shard offset, output offset
  int nt;
  uint8_t* out_peers[KF_MAX_RANKS];
  float* scales;
  float* amax_peers[KF_MAX_RANKS];  // [2 parities][W][nt] in every rank's workspace
  uint32_t* local;                  // [2 parities][nt], this rank's (device state)
  uint32_t* counters;               // [2]: CTAs done with A, with B (monotonic)
  uint32_t* pad_peers[KF_MAX_RANKS];
  int rank, world;
};

__device__ __forceinline__ int64_t Cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// This rank's real rows of weight t: [x, x + n) of its shard, to out offset d.
__device__ __forceinline__ void Local(const Args& a, int t, int64_t& x, int64_t& n, int64_t& d) {
  const int64_t* row = a.table + 4 * t;
  const int64_t rows = row[0], cols = row[1], c = Cdiv(rows, a.world);
  const int64_t real = max(static_cast<int64_t>(0), min(rows, (a.rank + 1) * c) - a.rank * c);
  x = row[2];
  n = real * cols;
  d = row[3] + a.rank * c * cols;
}

// True in every thread of the CTA that is the last of the grid to pass this point.
__device__ bool LastCta(uint32_t* counter, uint32_t e) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    last = atomicAdd(counter, 1u) == e * gridDim.x - 1;
    if (last) __threadfence_system();
  }
  __syncthreads();
  return last;
}

__device__ __forceinline__ void WaitAll(const Args& a, int slot, uint32_t e) {
  if (threadIdx.x < a.world) kf_wait(a.pad_peers[a.rank] + slot * KF_MAX_RANKS + threadIdx.x, e);
  __syncthreads();
}

__device__ __forceinline__ void SignalAll(const Args& a, int slot, uint32_t e) {
  if (threadIdx.x < a.world) kf_signal(a.pad_peers[threadIdx.x] + slot * KF_MAX_RANKS + a.rank, e);
}

__device__ __forceinline__ uint8_t Q(float x, float s) {
  return __nv_cvt_float_to_fp8(__fmul_rn(x, s), __NV_SATFINITE, __NV_E4M3);
}

__global__ void __launch_bounds__(kThreads) Fused(Args a, uint32_t* epoch_slot) {
  __shared__ float scale[kMaxTensors];
  __shared__ float warp_max[kThreads / 32];
  const uint32_t e = *epoch_slot + 1;  // read by every CTA before any CTA moves it
  const int par = e & 1;
  uint32_t* local = a.local + par * a.nt;
  const int64_t g = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t me = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  // A: local amaxes.
  for (int t = 0; t < a.nt; ++t) {
    int64_t x, n, d;
    Local(a, t, x, n, d);
    float m = 0.0f;
    for (int64_t j = me; j < n; j += g) m = fmaxf(m, fabsf(a.shards[x + j]));
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
      if (m > 0.0f) atomicMax(local + t, __float_as_uint(m));
    }
    __syncthreads();
  }
  if (LastCta(a.counters, e)) {
    for (int i = threadIdx.x; i < a.world * a.nt; i += kThreads) {
      const int dst = i / a.nt, t = i % a.nt;
      a.amax_peers[dst][(par * a.world + a.rank) * a.nt + t] =
          __uint_as_float(atomicAdd(local + t, 0u));
    }
    // The other parity's slots start the next call at zero; nobody reads them now.
    for (int t = threadIdx.x; t < a.nt; t += kThreads) a.local[(par ^ 1) * a.nt + t] = 0u;
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence_system();
      *epoch_slot = e;  // every CTA has read it: they all passed LastCta
    }
    __syncthreads();
    SignalAll(a, 0, e);
  }
  // B: the scales, then the bytes.
  WaitAll(a, 0, e);
  for (int t = threadIdx.x; t < a.nt; t += kThreads) {
    float m = 0.0f;
    for (int p = 0; p < a.world; ++p)
      m = fmaxf(m, *(volatile float*)&a.amax_peers[a.rank][(par * a.world + p) * a.nt + t]);
    scale[t] = static_cast<float>(448.0 / static_cast<double>(fmaxf(m, 1e-12f)));
    if (blockIdx.x == 0) a.scales[t] = scale[t];
  }
  __syncthreads();
  for (int t = 0; t < a.nt; ++t) {
    int64_t x, n, d;
    Local(a, t, x, n, d);
    const float s = scale[t];
    // Bytes before the first 16-byte boundary of the destination, then 16 at a time.
    const int64_t head = min(n, (16 - d % 16) % 16);
    if (me < head) {
      const uint8_t v = Q(a.shards[x + me], s);
      for (int p = 0; p < a.world; ++p) a.out_peers[p][d + me] = v;
    }
    const int64_t groups = (n - head) / 16;
    for (int64_t k = me; k < groups; k += g) {
      const int64_t j = head + 16 * k;
      uint32_t word[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t b = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i)
          b |= static_cast<uint32_t>(Q(a.shards[x + j + 4 * q + i], s)) << (8 * i);
        word[q] = b;
      }
      const uint4 v = make_uint4(word[0], word[1], word[2], word[3]);
      for (int p = 0; p < a.world; ++p) *reinterpret_cast<uint4*>(a.out_peers[p] + d + j) = v;
    }
    for (int64_t j = head + 16 * groups + me; j < n; j += g) {
      const uint8_t v = Q(a.shards[x + j], s);
      for (int p = 0; p < a.world; ++p) a.out_peers[p][d + j] = v;
    }
  }
  if (LastCta(a.counters + 1, e)) {
    SignalAll(a, 1, e);
    WaitAll(a, 1, e);
  }
}

struct State {
  uint32_t* dev;  // [0]: epoch, [1..2]: counters, then [2][kMaxTensors] local amax slots
  int ctas;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  State* st = new State;
  // Few CTAs when ranks share a GPU, so that all ranks' CTAs are resident together.
  st->ctas = ctx->emulated ? 4 : ctx->gpu.sm_count;
  const size_t bytes = (3 + 2 * kMaxTensors) * sizeof(uint32_t);
  if (cudaMalloc(&st->dev, bytes) != cudaSuccess) return 1;
  if (cudaMemset(st->dev, 0, bytes) != cudaSuccess) return 1;
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor& tensors = *kf_input(ctx, "tensors");
  Args a;
  a.nt = static_cast<int>(tensors.shape[0]);
  a.rank = ctx->rank;
  a.world = ctx->world_size;
  if (a.nt > kMaxTensors) return 2;
  if (2ull * a.world * a.nt * sizeof(float) > ctx->workspace.nbytes) return 3;
  a.shards = static_cast<const float*>(kf_input(ctx, "shards")->data);
  a.table = static_cast<const int64_t*>(tensors.data);
  a.scales = static_cast<float*>(kf_output(ctx, "scales")->data);
  const kf_tensor& out = *kf_output(ctx, "weights_fp8");
  for (int r = 0; r < a.world; ++r) {
    a.out_peers[r] = static_cast<uint8_t*>(out.peers[r]);
    a.amax_peers[r] = static_cast<float*>(ctx->workspace.peers[r]);
    a.pad_peers[r] = static_cast<uint32_t*>(ctx->signal_pad.peers[r]);
  }
  a.counters = st->dev + 1;
  a.local = st->dev + 3;
  Fused<<<st->ctas, kThreads, 0, ctx->stream>>>(a, st->dev);
  return cudaGetLastError() != cudaSuccess ? 4 : 0;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  cudaFree(st->dev);
  delete st;
  return 0;
}
