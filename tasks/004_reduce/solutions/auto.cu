// Expert reduce (sum) to a root, choosing its algorithm by size as a tuned library does:
//   - small messages: one-shot. After a start barrier the root reads every rank's x,
//     sums in fp32 and writes its y (vLLM's one-stage custom all-reduce,
//     csrc/custom_all_reduce.cuh cross_device_reduce_1stage, done by the root alone).
//     One synchronisation round, but (W-1) N bytes come into the root.
//   - large messages: reduce-scatter + gather (Rabenseifner; MPICH's
//     MPIR_Reduce_intra_reduce_scatter_gather), on symmetric memory. The W-1 non-root
//     ranks each own one part of the vector: owner j reads part j of every rank's x,
//     sums it and writes the sum straight into the root's y, then tells the root it is
//     done. N bytes come into the root (what any algorithm must bring it), every rank
//     sends about N, so the busiest link carries about N as in NCCL's pipelined ring
//     reduce, with two synchronisation rounds (start barrier, done flags) instead of a
//     ring's W-1 hops.
// The switch: one-shot brings (W-2) N more bytes into the root than reduce-scatter +
// gather, which costs one more round (a few microseconds on NVLink); at ~370 GB/s that
// is (W-2) N < 1 MiB: always at W = 2, below 512 KiB at W = 4, 170 KiB at W = 8.
// Sums are fp32 in rank order 0..W-1 in both, rounded once. Every other rank's y is
// its own x (as NCCL leaves it).
//
// Barriers: block b of every rank handshakes with block b of every peer through slot
// [b * W + src] of the receiver's signal pad (start barrier: slots from 0, done flags:
// slots from max_blocks * W), with a per-block epoch kept in device memory, so
// back-to-back calls never see a stale flag. Owners write into the root's y only after
// the start barrier (the root is in this call), and the root returns only after every
// owner's block b has said its part is written. Only inputs are read across ranks; the
// harness leaves them alone until every rank has returned. The root comes from the
// task's param, never assumed to be rank 0.
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
  uint32_t* epochs = nullptr;  // one epoch per block (device memory)
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

// dst[e] = sum over ranks q of x_q[off + e] for the elements of unit u of a range of
// n elements, fp32 accumulation in rank order; vectors when the unit is whole and the
// pointers aligned, element by element otherwise.
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

// What one rank does in one call.
template <typename T>
struct Plan {
  PeerPtrs x;        // every rank's x
  int64_t off = 0;   // first element this rank sums
  int64_t len = 0;   // elements it sums (0: none)
  T* sum = nullptr;  // where the sums go: this rank's y (one-shot root) or the root's (owner)
  bool vec = false;  // 16-byte vectors for the sums
  const char* copy_src = nullptr;  // a non-root's x, copied to its own y
  char* copy_dst = nullptr;
  int64_t copy_bytes = 0;
  bool owner = false;    // two-phase, not the root: signal the root when done
  bool collect = false;  // two-phase root: wait for every owner
  int done_slot0 = 0;    // first slot of the done flags in the pad
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    ReduceKernel(Plan<T> plan, PeerPads pads, uint32_t* epochs, int rank, int root, int world) {
  __shared__ uint32_t last_epoch;
  if (threadIdx.x == 0) last_epoch = epochs[blockIdx.x];
  __syncthreads();
  const uint32_t epoch = last_epoch + 1;

  BlockBarrier(pads, rank, world, epoch);  // every x is ready, the root is in this call

  constexpr int V = Elem<T>::kPerVec;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t units = (plan.len + V - 1) / V;
  for (int64_t u = first; u < units; u += stride)
    SumUnit<T>(plan.x, plan.off, plan.sum, u, plan.len, plan.vec, world);

  if (plan.owner) {  // this block's sums are in the root's y
    __syncthreads();
    if (threadIdx.x == 0)
      kf_signal(pads.p[root] + plan.done_slot0 + blockIdx.x * world + rank, epoch);
  }
  if (plan.collect) {  // block b of every owner has written its sums here
    const int peer = threadIdx.x;
    if (peer < world && peer != rank)
      kf_wait(pads.p[rank] + plan.done_slot0 + blockIdx.x * world + peer, epoch);
    __syncthreads();
  }

  // A non-root's own y, after the sums so that the root is not kept waiting.
  const bool aligned =
      ((reinterpret_cast<uintptr_t>(plan.copy_src) | reinterpret_cast<uintptr_t>(plan.copy_dst)) &
       15) == 0;
  const int64_t vecs = aligned ? plan.copy_bytes / 16 : 0;
  for (int64_t i = first; i < vecs; i += stride) {
    reinterpret_cast<uint4*>(plan.copy_dst)[i] = reinterpret_cast<const uint4*>(plan.copy_src)[i];
  }
  for (int64_t i = vecs * 16 + first; i < plan.copy_bytes; i += stride)
    plan.copy_dst[i] = plan.copy_src[i];

  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch;
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// The task's root param, or -1 when it is missing or not a rank.
int Root(const kf_ctx* ctx) {
  const double r = kf_param(ctx, "root", -1.0);
  const int root = static_cast<int>(r);
  return (root == r && root >= 0 && root < ctx->world_size) ? root : -1;
}

bool OneShot(int world, int64_t bytes) {
  return world <= 2 || (world - 2) * bytes < (int64_t{1} << 20);
}

template <typename T>
int Run(kf_ctx* ctx, const State* st) {
  const int root = Root(ctx);
  if (root < 0) return 1;
  const kf_tensor& xt = ctx->inputs[0];
  kf_tensor& yt = ctx->outputs[0];
  const int world = ctx->world_size;
  const int rank = ctx->rank;
  const int64_t n = xt.numel;
  constexpr int V = Elem<T>::kPerVec;

  Plan<T> plan;
  for (int q = 0; q < KF_MAX_RANKS; ++q)
    plan.x.p[q] = q < world ? static_cast<char*>(xt.peers[q]) : nullptr;
  plan.done_slot0 = st->max_blocks * world;
  if (rank != root) {
    plan.copy_src = static_cast<const char*>(xt.data);
    plan.copy_dst = static_cast<char*>(yt.data);
    plan.copy_bytes = static_cast<int64_t>(xt.nbytes);
  }
  int64_t grid_units = 0;  // the same on every rank
  if (OneShot(world, n * static_cast<int64_t>(sizeof(T)))) {
    grid_units = (n + V - 1) / V;
    if (rank == root) {
      plan.len = n;
      plan.sum = static_cast<T*>(yt.data);
    }
  } else {
    // Part j (of W-1, whole 16-byte vectors) belongs to the j-th rank after the root.
    const int64_t part = ((n + world - 2) / (world - 1) + V - 1) / V * V;
    grid_units = part / V;
    if (rank == root) {
      plan.collect = true;
    } else {
      const int j = (rank - root - 1 + world) % world;
      plan.owner = true;
      plan.off = j * part < n ? j * part : n;
      plan.len = n - plan.off < part ? n - plan.off : part;
      plan.sum = static_cast<T*>(yt.peers[root]) + plan.off;
    }
  }
  plan.vec = plan.sum != nullptr && Aligned16(plan.sum);
  for (int q = 0; q < world; ++q)
    plan.vec = plan.vec && Aligned16(reinterpret_cast<const T*>(plan.x.p[q]) + plan.off);

  PeerPads pads;
  for (int q = 0; q < KF_MAX_RANKS; ++q) {
    pads.p[q] = q < world ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
  }
  // The grid depends only on values every rank shares, so block b exists on every
  // rank and the per-block barriers and done flags pair up.
  int64_t blocks = (grid_units + kThreads - 1) / kThreads;
  if (blocks > st->max_blocks) blocks = st->max_blocks;
  if (blocks < 1) blocks = 1;
  ReduceKernel<T><<<static_cast<int>(blocks), kThreads, 0, ctx->stream>>>(plan, pads, st->epochs,
                                                                          rank, root, world);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size < 1 || ctx->world_size > kMaxWorld) return 1;
  if (ctx->num_inputs < 1 || ctx->num_outputs < 1) return 1;
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& y = ctx->outputs[0];
  if (Root(ctx) < 0 || y.dtype != x.dtype || y.numel != x.numel) return 1;
  if (x.dtype != KF_BF16 && x.dtype != KF_F32) return 2;

  // Co-residency: when ranks share one GPU, each rank's grid must leave room for
  // the others' (a spinning grid that fills the GPU starves the peer it waits
  // for). The signal pad must hold 2 W slots per block (start barrier, done flags).
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int max_blocks = ctx->emulated ? sms / (2 * ctx->world_size) : sms;
  if (max_blocks < 1) max_blocks = 1;
  const size_t pad_blocks = ctx->signal_pad.nbytes / (sizeof(uint32_t) * 2 * ctx->world_size);
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
