// Expert all-reduce: vLLM's custom all-reduce as it ships (csrc/custom_all_reduce.cuh,
// CustomAllreduce::allreduce), choosing its algorithm by size the same way:
//   - one-stage (one-shot) when W == 2, or W <= 4 and the message is under 512 KiB, or
//     W <= 8 and it is under 256 KiB: after a start barrier every rank reads every
//     peer's whole x, sums in fp32 and writes its own y. One synchronisation round; it
//     reads (W-1) x, against 2(W-1)/W x for two-stage, so it wins where latency rules
//     (at W = 2 the two move the same bytes, so vLLM always takes it there).
//   - two-stage (two-shot) above: reduce-scatter (rank r sums chunk r of every rank's x
//     into its own scratch and y), a barrier, then all-gather (rank r pulls every other
//     chunk from its owner's scratch). Two synchronisation rounds and the ring's bytes,
//     2(W-1)/W of the vector per rank, so it keeps up with NCCL's ring at large sizes
//     (vLLM hands those to NCCL; NVLS, which NCCL would use there, is off on the
//     evaluation machines).
// Accumulation is fp32 in rank order 0..W-1 in both, so every rank computes
// bit-identical results and the size switch does not change a value.
//
// Barriers: block b of every rank handshakes with block b of every peer through slot
// [b * W + src] of the receiver's signal pad, with an epoch per block kept in device
// memory that grows with every barrier (the pad is zeroed only before kf_setup). vLLM's
// start_sync/end_sync do the same per block with a flag per block.
//
// No end barrier in either: one-stage reads only peers' inputs (the harness leaves them
// alone until every rank has returned) and two-stage reads peers' scratch, which its
// owner rewrites only after the next call's start barrier, i.e. after every peer has
// entered its next call and so finished this one (vLLM relies on the same). The
// two-stage barriers are per block because unit u of a chunk is handled by the same
// (block, thread) in both stages on every rank: every rank launches the same grid.
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

// dst[e] (and dst2[e] unless null) = sum over ranks q of src_q[e] for the elements of
// unit u of a range of n elements; vectors when the unit is whole and aligned, scalars
// otherwise.
template <typename T>
__device__ __forceinline__ void SumUnit(const PeerPtrs& x, int64_t off, T* dst, T* dst2, int64_t u,
                                        int64_t n, bool vec, int world) {
  using E = Elem<T>;
  constexpr int V = E::kPerVec;
  const int64_t e0 = u * V;
  if (vec && e0 + V <= n) {
    uint4 v[kMaxWorld];
#pragma unroll
    for (int q = 0; q < kMaxWorld; ++q) {
      if (q < world)
        v[q] = reinterpret_cast<const uint4*>(reinterpret_cast<const T*>(x.p[q]) + off + e0)[0];
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
    const uint4 packed = E::Pack(acc);
    reinterpret_cast<uint4*>(dst + e0)[0] = packed;
    if (dst2 != nullptr) reinterpret_cast<uint4*>(dst2 + e0)[0] = packed;
  } else {
    const int64_t e1 = e0 + V < n ? e0 + V : n;
    for (int64_t e = e0; e < e1; ++e) {
      float acc = 0.f;
      for (int q = 0; q < world; ++q) acc += E::Load(reinterpret_cast<const T*>(x.p[q]) + off + e);
      E::Store(dst + e, acc);
      if (dst2 != nullptr) E::Store(dst2 + e, acc);
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

// vLLM's crossover (custom_all_reduce.cuh): one-stage at W == 2 at every size, else
// below 512 KiB for W <= 4 and below 256 KiB for W <= 8 on a full NVLink mesh.
bool UseOneStage(int world, int64_t bytes) {
  if (world <= 2) return true;
  return (world <= 4 && bytes < 512 * 1024) || (world <= 8 && bytes < 256 * 1024);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    OneStageKernel(PeerPtrs x, T* y, int64_t n, bool vec, PeerPads pads, uint32_t* epochs, int rank,
                   int world) {
  constexpr int V = Elem<T>::kPerVec;
  __shared__ uint32_t last_epoch;
  if (threadIdx.x == 0) last_epoch = epochs[blockIdx.x];
  __syncthreads();
  const uint32_t epoch = last_epoch + 1;

  BlockBarrier(pads, rank, world, epoch);  // every peer's x is ready

  const int64_t units = (n + V - 1) / V;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units;
       u += stride) {
    SumUnit<T>(x, 0, y, nullptr, u, n, vec, world);
  }

  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    TwoStageKernel(PeerPtrs x, PeerPtrs scratch, T* out, int64_t n, int64_t chunk, bool vec,
                   PeerPads pads, uint32_t* epochs, int rank, int world) {
  constexpr int V = Elem<T>::kPerVec;
  __shared__ uint32_t last_epoch;
  if (threadIdx.x == 0) last_epoch = epochs[blockIdx.x];
  __syncthreads();
  const uint32_t epoch = last_epoch;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;

  BlockBarrier(pads, rank, world, epoch + 1);  // every peer's x is ready

  // Stage 1: reduce-scatter of chunk `rank` into this rank's scratch and y.
  {
    const int64_t lo = rank * chunk;
    const int64_t len = ChunkLen(n, chunk, rank);
    const int64_t units = (len + V - 1) / V;
    T* mine = reinterpret_cast<T*>(scratch.p[rank]);
    for (int64_t u = first; u < units; u += stride)
      SumUnit<T>(x, lo, out + lo, mine, u, len, vec, world);
  }

  BlockBarrier(pads, rank, world, epoch + 2);  // every owner's share of its chunk is out

  // Stage 2: all-gather from the owners' scratch, starting with the next rank so that
  // the ranks spread their reads over the peers.
  for (int k = 1; k < world; ++k) {
    const int p = (rank + k) % world;
    const int64_t lo = p * chunk;
    const int64_t len = ChunkLen(n, chunk, p);
    const int64_t units = (len + V - 1) / V;
    const T* src = reinterpret_cast<const T*>(scratch.p[p]);
    for (int64_t u = first; u < units; u += stride) CopyUnit<T>(src, out + lo, u, len, vec);
  }

  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch + 2;
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Chunks of the two-stage split are cdiv(N, W) rounded up to whole 16-byte vectors, so
// that every chunk starts aligned; the last ones may be short or empty.
int64_t ChunkElems(int64_t n, int world, int per_vec) {
  return ((n + world - 1) / world + per_vec - 1) / per_vec * per_vec;
}

template <typename T>
int Launch(kf_ctx* ctx, const State* st) {
  const kf_tensor& xt = ctx->inputs[0];
  kf_tensor& yt = ctx->outputs[0];
  const int world = ctx->world_size;
  const int64_t n = xt.numel;
  constexpr int V = Elem<T>::kPerVec;

  PeerPtrs x, scratch;
  PeerPads pads;
  bool vec = Aligned16(yt.data);
  for (int q = 0; q < KF_MAX_RANKS; ++q) {
    x.p[q] = q < world ? static_cast<char*>(xt.peers[q]) : nullptr;
    scratch.p[q] = q < world ? static_cast<char*>(ctx->workspace.peers[q]) : nullptr;
    pads.p[q] = q < world ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
    if (q < world) vec = vec && Aligned16(x.p[q]) && Aligned16(scratch.p[q]);
  }
  // The grid depends only on values every rank shares (N, W, the GPU), so block b
  // exists on every rank and the per-block barriers pair up.
  const bool one_stage = UseOneStage(world, n * static_cast<int64_t>(sizeof(T)));
  const int64_t chunk = ChunkElems(n, world, V);
  const int64_t units = one_stage ? (n + V - 1) / V : chunk / V;
  int64_t blocks = (units + kThreads - 1) / kThreads;
  if (blocks > st->max_blocks) blocks = st->max_blocks;
  if (blocks < 1) blocks = 1;

  if (one_stage) {
    OneStageKernel<T><<<static_cast<int>(blocks), kThreads, 0, ctx->stream>>>(
        x, static_cast<T*>(yt.data), n, vec, pads, st->epochs, ctx->rank, world);
  } else {
    TwoStageKernel<T><<<static_cast<int>(blocks), kThreads, 0, ctx->stream>>>(
        x, scratch, static_cast<T*>(yt.data), n, chunk, vec, pads, st->epochs, ctx->rank, world);
  }
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
  // Two-stage keeps this rank's reduced chunk in the workspace (vLLM's tmp buffer).
  const int64_t elem = static_cast<int64_t>(kf_dtype_size(xt.dtype));
  const int64_t chunk = ChunkElems(xt.numel, ctx->world_size, static_cast<int>(16 / elem));
  if (static_cast<int64_t>(ctx->workspace.nbytes) < chunk * elem) return 1;

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
    case KF_BF16:
      return Launch<__nv_bfloat16>(ctx, st);
    case KF_F32:
      return Launch<float>(ctx, st);
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
