// The halo exchange fused into the conv: no packing, no sends. Every block of
// a persistent grid first tells the same block of its neighbours (ranks r-1
// and r+1) "I am in this call" and, without waiting, convolves its share of
// everything that needs no peer data: every chunk but the first K-1 outputs of
// the chunks whose halo lives on a neighbour (rank 0's first chunk sees zeros,
// rank W-1's second chunk its own first chunk). Only then does it wait for the
// neighbours' signals, which have long arrived, and compute those first K-1
// outputs reading the neighbours' chunk tails through the peer pointers. The
// baseline's pack kernel, NCCL round trip and halo buffers disappear, and the
// handshake's latency hides behind the interior.
//
// Interior tiles: kTile outputs of one row-chunk; the window [start - (K-1),
// start + n) is staged in shared memory as floats (16-byte loads when rows are
// aligned), then each thread computes outputs tid, tid + 256, ... from it.
// No end barrier: peers' inputs are only read, and no peer can enter its next
// call (whose inputs the harness writes after every rank's call returned)
// before this one has finished.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kTile = 4096;  // outputs per interior tile

__device__ __forceinline__ float ToF(float v) { return v; }
__device__ __forceinline__ float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T FromF(float v);
template <>
__device__ __forceinline__ float FromF<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromF<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}

// One 16-byte vector of T as floats: 8 bf16 into two float4, 4 f32 into one.
template <typename T>
__device__ __forceinline__ void StoreWide(float4* dst, uint4 u);
template <>
__device__ __forceinline__ void StoreWide<float>(float4* dst, uint4 u) {
  dst[0] = make_float4(__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z),
                       __uint_as_float(u.w));
}
__device__ __forceinline__ float Lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float Hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }
template <>
__device__ __forceinline__ void StoreWide<__nv_bfloat16>(float4* dst, uint4 u) {
  dst[0] = make_float4(Lo(u.x), Hi(u.x), Lo(u.y), Hi(u.y));
  dst[1] = make_float4(Lo(u.z), Hi(u.z), Lo(u.w), Hi(u.w));
}

struct Args {
  const void* x;
  const void* x_prev;  // rank r-1's x (null on rank 0)
  const void* x_next;  // rank r+1's x (null on rank W-1)
  const void* w;
  void* y;
  uint32_t* pad_self;
  uint32_t* pad_prev;
  uint32_t* pad_next;
  uint32_t* epochs;
  int rank, world;
  int64_t rows, d, c, k;
  int64_t segs;  // tiles per row-chunk
  bool vec;      // chunks start 16-byte aligned and hold whole vectors
};

template <typename T>
__global__ void __launch_bounds__(kThreads) FusedConv(Args a) {
  extern __shared__ float4 smem4[];  // 16-byte aligned
  float* smem = reinterpret_cast<float*>(smem4);
  __shared__ uint32_t epoch;
  const int64_t h = a.k - 1, c = a.c;
  // The window's main part starts 16-byte aligned in shared memory, its halo
  // just before: win[0, h) halo, win[h, h + n) the tile's own positions.
  const int64_t main_at = (h + 3) / 4 * 4;
  float* win = smem + main_at - h;   // kTile + h
  float* wsh = smem + main_at + kTile;  // k
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  T* y = static_cast<T*>(a.y);
  const bool first = a.rank == 0, last = a.rank == a.world - 1;

  // Arrive: neighbours may read this rank's x from now on (the harness wrote
  // it before this call).
  if (threadIdx.x == 0) {
    epoch = a.epochs[blockIdx.x] + 1;
    if (!first) kf_signal(a.pad_prev + blockIdx.x * a.world + a.rank, epoch);
    if (!last) kf_signal(a.pad_next + blockIdx.x * a.world + a.rank, epoch);
  }

  // Pass 1: everything that needs no peer data.
  const int64_t tiles = a.rows * 2 * a.segs;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t row = tile / (2 * a.segs);
    const int64_t rest = tile - row * 2 * a.segs;
    const int half = rest >= a.segs ? 1 : 0;
    const int64_t start = (rest - half * a.segs) * kTile;
    const int64_t n = min(static_cast<int64_t>(kTile), c - start);
    const bool peer_halo = half == 0 ? !first : !last;
    const T* chunk = x + (row * 2 + half) * c;
    __syncthreads();  // the previous tile's readers are done with win and wsh
    for (int64_t j = threadIdx.x; j < a.k; j += kThreads) wsh[j] = ToF(w[(row % a.d) * a.k + j]);
    // Halo part of the window: positions start-h .. start-1 of this chunk.
    for (int64_t j = threadIdx.x; j < h; j += kThreads) {
      const int64_t t = start - h + j;
      float v = 0.f;
      if (t >= 0) {
        v = ToF(chunk[t]);
      } else if (half == 1 && last) {
        v = ToF(x[row * 2 * c + c + t]);  // chunk W follows chunk W-1, both here
      }  // else zeros: rank 0's causal padding, or outputs pass 2 computes
      win[j] = v;
    }
    if (a.vec) {
      // Two 16-byte loads in flight per thread, then float4 stores.
      constexpr int kVec = 16 / sizeof(T);
      const uint4* src = reinterpret_cast<const uint4*>(chunk + start);
      float4* dst = reinterpret_cast<float4*>(win + h);
      const int64_t nv = n / kVec;
      for (int64_t q0 = threadIdx.x; q0 < nv; q0 += 2 * kThreads) {
        const int64_t q1 = q0 + kThreads;
        const uint4 u0 = src[q0];
        const uint4 u1 = q1 < nv ? src[q1] : make_uint4(0, 0, 0, 0);
        StoreWide<T>(dst + q0 * (kVec / 4), u0);
        if (q1 < nv) StoreWide<T>(dst + q1 * (kVec / 4), u1);
      }
    } else {
      for (int64_t q = threadIdx.x; q < n; q += kThreads) win[h + q] = ToF(chunk[start + q]);
    }
    __syncthreads();
    T* out = y + (row * 2 + half) * c + start;
    for (int64_t o = threadIdx.x; o < n; o += kThreads) {
      if (peer_halo && start + o < h) continue;
      float s = 0.f;
      for (int64_t j = 0; j < a.k; ++j) s = fmaf(wsh[j], win[o + j], s);
      out[o] = FromF<T>(s);
    }
  }

  // Pass 2: the first K-1 outputs of the chunks whose halo is a neighbour's
  // chunk tail (rank r-1's first chunk, rank r+1's second chunk).
  __syncthreads();
  if (threadIdx.x == 0) {
    if (!first) kf_wait(a.pad_self + blockIdx.x * a.world + (a.rank - 1), epoch);
    if (!last) kf_wait(a.pad_self + blockIdx.x * a.world + (a.rank + 1), epoch);
    a.epochs[blockIdx.x] = epoch;
  }
  __syncthreads();
  const T* prev = static_cast<const T*>(a.x_prev);
  const T* next = static_cast<const T*>(a.x_next);
  const int64_t items = a.rows * 2 * h;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; idx < items;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = idx / (2 * h);
    const int64_t rest = idx - row * 2 * h;
    const int half = rest >= h ? 1 : 0;
    const int64_t i = rest - half * h;
    if (half == 0 ? first : last) continue;  // done in pass 1
    // The neighbour's chunk tail ends where this chunk begins: rank r-1's
    // first chunk (ends at column C), rank r+1's second chunk (ends at 2C).
    const T* tail = half == 0 ? prev + row * 2 * c + c : next + row * 2 * c + 2 * c;
    const T* chunk = x + (row * 2 + half) * c;
    const T* wr = w + (row % a.d) * a.k;
    float s = 0.f;
    for (int64_t j = 0; j < a.k; ++j) {
      const int64_t t = i - h + j;
      s = fmaf(ToF(wr[j]), ToF(t < 0 ? tail[t] : chunk[t]), s);
    }
    y[(row * 2 + half) * c + i] = FromF<T>(s);
  }
}

struct State {
  uint32_t* epochs = nullptr;
  int blocks = 0;
};

template <typename T>
int Launch(kf_ctx* ctx, const State* st) {
  const kf_tensor& xt = ctx->inputs[0];
  const kf_tensor& wt = ctx->inputs[1];
  const int rank = ctx->rank, world = ctx->world_size;
  Args a = {};
  a.x = xt.data;
  a.x_prev = rank > 0 ? xt.peers[rank - 1] : nullptr;
  a.x_next = rank < world - 1 ? xt.peers[rank + 1] : nullptr;
  a.w = wt.data;
  a.y = ctx->outputs[0].data;
  a.pad_self = static_cast<uint32_t*>(ctx->signal_pad.data);
  a.pad_prev = rank > 0 ? static_cast<uint32_t*>(ctx->signal_pad.peers[rank - 1]) : nullptr;
  a.pad_next = rank < world - 1 ? static_cast<uint32_t*>(ctx->signal_pad.peers[rank + 1]) : nullptr;
  a.epochs = st->epochs;
  a.rank = rank;
  a.world = world;
  a.rows = xt.shape[0] * xt.shape[1];
  a.d = xt.shape[1];
  a.c = xt.shape[2] / 2;
  a.k = wt.shape[1];
  if (a.k < 2 || a.c < a.k - 1) return 1;
  a.segs = (a.c + kTile - 1) / kTile;
  // Buffers are 256-byte aligned: every chunk and tile starts on 16 bytes when
  // C holds whole 16-byte vectors.
  a.vec = (a.c * static_cast<int64_t>(sizeof(T))) % 16 == 0;
  const size_t smem = (kTile + 2 * a.k + 4) * sizeof(float);  // see main_at
  if (smem > 48 * 1024 &&
      cudaFuncSetAttribute(FusedConv<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem)) != cudaSuccess)
    return 1;
  FusedConv<T><<<st->blocks, kThreads, smem, ctx->stream>>>(a);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int world = ctx->world_size;
  if (world < 2 || ctx->num_inputs < 2 || ctx->num_outputs < 1 || ctx->inputs[0].ndim != 3 ||
      ctx->inputs[1].ndim != 2)
    return 1;
  // Same grid on every rank (blocks pair up across ranks). When ranks share a
  // GPU, all their blocks must be resident at once (pass 2 waits on peers).
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int blocks = ctx->emulated ? sms / (2 * world) : 4 * sms;
  const int pad_blocks = static_cast<int>(ctx->signal_pad.nbytes / (sizeof(uint32_t) * world));
  if (blocks > pad_blocks) blocks = pad_blocks;
  if (blocks < 1) blocks = 1;
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
  if (ctx->inputs[0].dtype == KF_BF16) return Launch<__nv_bfloat16>(ctx, st);
  if (ctx->inputs[0].dtype == KF_F32) return Launch<float>(ctx, st);
  return 2;
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
