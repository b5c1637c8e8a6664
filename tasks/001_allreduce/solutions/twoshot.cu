// Two-shot all-reduce: reduce-scatter then all-gather, both through peer reads.
//   1. Rank r owns chunk r of the vector. It reads chunk r of every peer's x,
//      sums in fp32 (rank order 0..W-1) and writes the result into chunk r of its
//      own y.
//   2. Barrier, then rank r pulls every other chunk p from rank p's y.
//   3. End barrier: peers read this rank's y in step 2, so this rank must not
//      finish (and let the harness poison or check y) before they are done.
// Each rank moves 2(W-1)/W of the vector, against (W-1) for one-shot: the
// choice for large messages.
//
// Chunks are cdiv(N, W) rounded up to a whole 16-byte vector, so every chunk
// starts aligned; the last chunks may be short or empty when N is not a
// multiple. Barrier: per-block handshake through the signal pad (slot
// [b * W + src] of the receiver's pad) with per-block epochs kept in device
// memory. Per-block barriers are enough because element e of a chunk is handled
// by the same block in steps 1 and 2 on every rank: unit u (one vector) goes to
// thread u mod (grid * threads), and every rank launches the same grid.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 512;
constexpr int kMaxWorld = 8;  // the task's largest world size; loads are unrolled to it

struct PeerPtrs {
  char* p[KF_MAX_RANKS];
};
struct PeerPads {
  uint32_t* p[KF_MAX_RANKS];
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

// 16 bytes of T <-> fp32 values.
template <typename T>
struct Elem;

template <>
struct Elem<float> {
  static constexpr int kPerVec = 4;
  __device__ static float Load(const float* p) { return *p; }
  __device__ static void Store(float* p, float v) { *p = v; }
  __device__ static void Unpack(const uint4& v, float* f) {
    f[0] = __uint_as_float(v.x);
    f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z);
    f[3] = __uint_as_float(v.w);
  }
  __device__ static uint4 Pack(const float* f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                      __float_as_uint(f[3]));
  }
};

template <>
struct Elem<__nv_bfloat16> {
  static constexpr int kPerVec = 8;
  __device__ static float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
  __device__ static void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
  __device__ static void Unpack(const uint4& v, float* f) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 t = __bfloat1622float2(h[i]);
      f[2 * i] = t.x;
      f[2 * i + 1] = t.y;
    }
  }
  __device__ static uint4 Pack(const float* f) {
    uint4 v;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return v;
  }
};

// dst[e] = sum over ranks q of src_q[e] for the elements of unit u of a range of
// n elements; vectors when the unit is whole and aligned, scalars otherwise.
template <typename T>
__device__ __forceinline__ void SumUnit(const PeerPtrs& x, int64_t off, T* dst, int64_t u,
                                        int64_t n, bool vec, int world) {
  using E = Elem<T>;
  constexpr int V = E::kPerVec;
  const int64_t e0 = u * V;
  if (vec && e0 + V <= n) {
    uint4 v[kMaxWorld];
#pragma unroll
    for (int q = 0; q < kMaxWorld; ++q) {
      if (q < world) v[q] = reinterpret_cast<const uint4*>(reinterpret_cast<const T*>(x.p[q]) + off + e0)[0];
    }
    float acc[V];
    E::Unpack(v[0], acc);
#pragma unroll
    for (int q = 1; q < kMaxWorld; ++q) {
      if (q < world) {
        float f[V];
        E::Unpack(v[q], f);
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] += f[k];
      }
    }
    reinterpret_cast<uint4*>(dst + e0)[0] = E::Pack(acc);
  } else {
    const int64_t e1 = e0 + V < n ? e0 + V : n;
    for (int64_t e = e0; e < e1; ++e) {
      float acc = 0.f;
      for (int q = 0; q < world; ++q) acc += E::Load(reinterpret_cast<const T*>(x.p[q]) + off + e);
      E::Store(dst + e, acc);
    }
  }
}

// dst[e] = src[e] for the elements of unit u, with the same unit split as SumUnit.
template <typename T>
__device__ __forceinline__ void CopyUnit(const T* src, T* dst, int64_t u, int64_t n, bool vec) {
  constexpr int V = Elem<T>::kPerVec;
  const int64_t e0 = u * V;
  if (vec && e0 + V <= n) {
    reinterpret_cast<uint4*>(dst + e0)[0] = reinterpret_cast<const uint4*>(src + e0)[0];
  } else {
    const int64_t e1 = e0 + V < n ? e0 + V : n;
    for (int64_t e = e0; e < e1; ++e) dst[e] = src[e];
  }
}

__device__ __forceinline__ int64_t ChunkLen(int64_t n, int64_t chunk, int c) {
  const int64_t left = n - c * chunk;
  return left <= 0 ? 0 : (left < chunk ? left : chunk);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    TwoShotKernel(PeerPtrs x, PeerPtrs y, T* out, int64_t n, int64_t chunk, bool vec,
                  PeerPads pads, uint32_t* epochs, int rank, int world) {
  constexpr int V = Elem<T>::kPerVec;
  __shared__ uint32_t last_epoch;
  if (threadIdx.x == 0) last_epoch = epochs[blockIdx.x];
  __syncthreads();
  const uint32_t epoch = last_epoch;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;

  BlockBarrier(pads, rank, world, epoch + 1);  // every peer's x is ready

  // Step 1: reduce-scatter into chunk `rank` of this rank's y.
  {
    const int64_t lo = rank * chunk;
    const int64_t len = ChunkLen(n, chunk, rank);
    const int64_t units = (len + V - 1) / V;
    for (int64_t u = first; u < units; u += stride) SumUnit<T>(x, lo, out + lo, u, len, vec, world);
  }

  BlockBarrier(pads, rank, world, epoch + 2);  // every rank's share of its chunk is in its y

  // Step 2: all-gather; start with the next rank so that the ranks spread their reads.
  for (int k = 1; k < world; ++k) {
    const int p = (rank + k) % world;
    const int64_t lo = p * chunk;
    const int64_t len = ChunkLen(n, chunk, p);
    const int64_t units = (len + V - 1) / V;
    const T* src = reinterpret_cast<const T*>(y.p[p]) + lo;
    for (int64_t u = first; u < units; u += stride) CopyUnit<T>(src, out + lo, u, len, vec);
  }

  BlockBarrier(pads, rank, world, epoch + 3);  // peers are done reading this rank's y

  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch + 3;
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <typename T>
int Launch(kf_ctx* ctx, const State* st) {
  const kf_tensor& xt = ctx->inputs[0];
  kf_tensor& yt = ctx->outputs[0];
  const int world = ctx->world_size;
  const int64_t n = xt.numel;
  constexpr int V = Elem<T>::kPerVec;

  PeerPtrs x, y;
  PeerPads pads;
  bool vec = Aligned16(yt.data);
  for (int q = 0; q < KF_MAX_RANKS; ++q) {
    x.p[q] = q < world ? static_cast<char*>(xt.peers[q]) : nullptr;
    y.p[q] = q < world ? static_cast<char*>(yt.peers[q]) : nullptr;
    pads.p[q] = q < world ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
    if (q < world) vec = vec && Aligned16(x.p[q]) && Aligned16(y.p[q]);
  }
  // Whole vectors per chunk keep every chunk start 16-byte aligned.
  const int64_t chunk = ((n + world - 1) / world + V - 1) / V * V;
  // The grid depends only on values every rank shares (n, W, the GPU), so block b
  // exists on every rank and the per-block barriers pair up.
  const int64_t units = chunk / V;
  int64_t blocks = (units + kThreads - 1) / kThreads;
  if (blocks > st->max_blocks) blocks = st->max_blocks;
  if (blocks < 1) blocks = 1;

  TwoShotKernel<T><<<static_cast<int>(blocks), kThreads, 0, ctx->stream>>>(
      x, y, static_cast<T*>(yt.data), n, chunk, vec, pads, st->epochs, ctx->rank, world);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size < 1 || ctx->world_size > kMaxWorld) return 1;
  if (ctx->num_inputs < 1 || ctx->num_outputs < 1) return 1;
  const kf_tensor& xt = ctx->inputs[0];
  const kf_tensor& yt = ctx->outputs[0];
  if (yt.numel != xt.numel || yt.dtype != xt.dtype) return 1;
  if (xt.dtype != KF_BF16 && xt.dtype != KF_F32) return 2;

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
  switch (ctx->inputs[0].dtype) {
    case KF_BF16: return Launch<__nv_bfloat16>(ctx, st);
    case KF_F32: return Launch<float>(ctx, st);
    default: return 2;
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
