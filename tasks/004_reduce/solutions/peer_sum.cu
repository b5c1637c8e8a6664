// Reduce (sum) to the root by peer reads: after a start barrier (every peer's x
// is ready) the root reads every rank's x, sums in fp32 (rank order 0..W-1) and
// writes its own y. The other ranks take part in the barrier and copy their own x
// to their own y. Only peers' inputs are read and no peer's output is written, so
// no end barrier is needed: a peer's next call cannot pass its start barrier
// before the root has finished this one.
//
// Barrier: per-block handshake through the signal pad (slot [b * W + src] of the
// receiver's pad) with per-block epochs kept in device memory, so back-to-back
// calls never see a stale flag. Every rank launches the same grid (computed from
// N, not from its own share of the work) so that the blocks pair up. The root
// comes from the task's param, never assumed to be rank 0.
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

// y[e] = sum over ranks q of x_q[off + e] for e in [0, n), fp32 accumulation in
// rank order. The range is cut into units of kPerVec elements; a whole unit
// with 16-byte aligned pointers goes as vectors, a partial one (the tail, or
// everything when the rows are misaligned) element by element.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    SumKernel(PeerPtrs x, int64_t off, T* y, int64_t n, bool vec, PeerPads pads,
              uint32_t* epochs, int rank, int world) {
  using E = Elem<T>;
  constexpr int V = E::kPerVec;
  __shared__ uint32_t last_epoch;
  if (threadIdx.x == 0) last_epoch = epochs[blockIdx.x];
  __syncthreads();
  const uint32_t epoch = last_epoch + 1;

  BlockBarrier(pads, rank, world, epoch);  // every peer's x is ready

  const int64_t units = (n + V - 1) / V;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units;
       u += stride) {
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
      reinterpret_cast<uint4*>(y + e0)[0] = E::Pack(acc);
    } else {
      const int64_t e1 = e0 + V < n ? e0 + V : n;
      for (int64_t e = e0; e < e1; ++e) {
        float acc = 0.f;
        for (int q = 0; q < world; ++q) acc += E::Load(reinterpret_cast<const T*>(x.p[q]) + off + e);
        E::Store(y + e, acc);
      }
    }
  }

  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch;
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Launches SumKernel over `n` elements at element offset `off` of every rank's
// x into this rank's y. `grid_elems` must be the same on every rank.
template <typename T>
int LaunchSum(kf_ctx* ctx, const State* st, int64_t off, int64_t n, int64_t grid_elems) {
  const kf_tensor& xt = ctx->inputs[0];
  kf_tensor& yt = ctx->outputs[0];
  const int world = ctx->world_size;
  constexpr int V = Elem<T>::kPerVec;

  PeerPtrs x;
  PeerPads pads;
  bool vec = Aligned16(yt.data);
  for (int q = 0; q < KF_MAX_RANKS; ++q) {
    x.p[q] = q < world ? static_cast<char*>(xt.peers[q]) : nullptr;
    pads.p[q] = q < world ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
    if (q < world) vec = vec && Aligned16(reinterpret_cast<const T*>(x.p[q]) + off);
  }
  // The grid depends only on values every rank shares, so block b exists on
  // every rank and the per-block barriers pair up.
  const int64_t units = (grid_elems + V - 1) / V;
  int64_t blocks = (units + kThreads - 1) / kThreads;
  if (blocks > st->max_blocks) blocks = st->max_blocks;
  if (blocks < 1) blocks = 1;

  SumKernel<T><<<static_cast<int>(blocks), kThreads, 0, ctx->stream>>>(
      x, off, static_cast<T*>(yt.data), n, vec, pads, st->epochs, ctx->rank, world);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

// The task's root param, or -1 when it is missing or not a rank.
[[maybe_unused]] int Root(const kf_ctx* ctx) {
  const double r = kf_param(ctx, "root", -1.0);
  const int root = static_cast<int>(r);
  return (root == r && root >= 0 && root < ctx->world_size) ? root : -1;
}

bool ShapesMatch(const kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& y = ctx->outputs[0];
  return Root(ctx) >= 0 && y.dtype == x.dtype && y.numel == x.numel;
}

template <typename T>
int Run(kf_ctx* ctx, const State* st) {
  const int root = Root(ctx);
  if (root < 0) return 1;
  const int64_t n = ctx->inputs[0].numel;
  if (LaunchSum<T>(ctx, st, 0, ctx->rank == root ? n : 0, n) != 0) return 1;
  if (ctx->rank == root) return 0;
  // Every other rank's y is its own x (checked like the root's sum).
  return cudaMemcpyAsync(ctx->outputs[0].data, ctx->inputs[0].data, ctx->inputs[0].nbytes,
                         cudaMemcpyDeviceToDevice, ctx->stream) == cudaSuccess
             ? 0
             : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size < 1 || ctx->world_size > kMaxWorld) return 1;
  if (ctx->num_inputs < 1 || ctx->num_outputs < 1) return 1;
  if (!ShapesMatch(ctx)) return 1;
  if (ctx->inputs[0].dtype != KF_BF16 && ctx->inputs[0].dtype != KF_F32) return 2;

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
    case KF_BF16: return Run<__nv_bfloat16>(ctx, st);
    case KF_F32: return Run<float>(ctx, st);
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
