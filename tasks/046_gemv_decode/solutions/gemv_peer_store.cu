// LM-head GEMV whose epilogue is the all-gather: every block computes a tile of 64 logits of this
// rank's vocab shard (w read once from HBM with 16-byte loads, fp32 accumulation, bias added before
// the single rounding) and stores the tile straight into the logits of EVERY rank (peer stores) at
// columns rank*V + row. No gathered copy, no second kernel: the links carry each logit once while
// the other tiles are still being computed.
//
// Ordering, per block b (the grid is the same on every rank, so block b exists everywhere):
//   - on entry it raises flag [b*W + rank] in every peer's pad (this call's epoch); before its
//     first store into peer q's logits it waits for q's block b to have raised its flag, i.e. for q
//     to be inside this call, after the harness reset q's output;
//   - after its last store it raises flag [kDoneBase + b*W + rank] in every peer's pad and waits
//   for
//     the same from every peer, so no rank leaves the call while a peer still writes its logits.
// The grid is small enough for every block of every rank to be resident (when ranks share one GPU,
// 1/(2W) of the SMs each), so the waits always make progress.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kMaxWorld = 8;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = 8;
constexpr int kTile = kWarps * kRowsPerWarp;  // logits per tile
constexpr int kMaxTokens = 8;
constexpr int kMaxBlocks = 512;
constexpr int kDoneBase = kMaxBlocks * kMaxWorld;

struct Ptrs {
  void* p[kMaxWorld];
};
struct Pads {
  uint32_t* p[kMaxWorld];
};

struct State {
  uint32_t epoch = 0;  // calls made; every rank makes the same calls
  int max_blocks = 1;
};

template <typename T>
struct Elem;
template <>
struct Elem<float> {
  static constexpr int kN = 4;
  __device__ static void Unpack(const uint4& v, float* f) {
    f[0] = __uint_as_float(v.x);
    f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z);
    f[3] = __uint_as_float(v.w);
  }
  __device__ static float ToF(float v) { return v; }
  __device__ static float FromF(float v) { return v; }
};
template <>
struct Elem<__nv_bfloat16> {
  static constexpr int kN = 8;
  __device__ static void Unpack(const uint4& v, float* f) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 t = __bfloat1622float2(h[i]);
      f[2 * i] = t.x;
      f[2 * i + 1] = t.y;
    }
  }
  __device__ static float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 FromF(float v) { return __float2bfloat16_rn(v); }
};

template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    GemvGather(const T* __restrict__ h, const T* __restrict__ w, const T* __restrict__ bias,
               Ptrs out, Pads pads, int rank, int world, uint32_t epoch, int tokens, int64_t hid,
               int64_t v) {
  using E = Elem<T>;
  constexpr int VN = E::kN;
  __shared__ float res[kMaxTokens][kTile];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x < world) kf_signal(pads.p[threadIdx.x] + blockIdx.x * world + rank, epoch);
  bool peers_in = false;
  const int64_t vt = v * world;
  const int64_t tiles = (v + kTile - 1) / kTile;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t row0 = tile * kTile;
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int local = warp * kRowsPerWarp + rr;
      const int64_t row = row0 + local;
      float acc[kMaxTokens];
#pragma unroll
      for (int t = 0; t < kMaxTokens; ++t) acc[t] = 0.f;
      if (row < v) {
        const T* wr = w + row * hid;
        if (kVec) {
          for (int64_t k = static_cast<int64_t>(lane) * VN; k < hid; k += 32 * VN) {
            float wf[VN];
            E::Unpack(*reinterpret_cast<const uint4*>(wr + k), wf);
#pragma unroll
            for (int t = 0; t < kMaxTokens; ++t) {
              if (t < tokens) {
                float hf[VN];
                E::Unpack(__ldg(reinterpret_cast<const uint4*>(h + t * hid + k)), hf);
#pragma unroll
                for (int i = 0; i < VN; ++i) acc[t] += wf[i] * hf[i];
              }
            }
          }
        } else {
          for (int64_t k = lane; k < hid; k += 32) {
            const float wf = E::ToF(wr[k]);
#pragma unroll
            for (int t = 0; t < kMaxTokens; ++t)
              if (t < tokens) acc[t] += wf * E::ToF(h[t * hid + k]);
          }
        }
      }
#pragma unroll
      for (int t = 0; t < kMaxTokens; ++t) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], o);
      }
      if (lane == 0) {
#pragma unroll
        for (int t = 0; t < kMaxTokens; ++t) res[t][local] = acc[t];
      }
    }
    __syncthreads();
    if (!peers_in) {
      if (threadIdx.x < world) kf_wait(pads.p[rank] + blockIdx.x * world + threadIdx.x, epoch);
      __syncthreads();
      peers_in = true;
    }
    for (int e = threadIdx.x; e < tokens * kTile; e += kThreads) {
      const int t = e / kTile, j = e % kTile;
      const int64_t row = row0 + j;
      if (row >= v) continue;
      const T val = E::FromF(res[t][j] + E::ToF(bias[row]));
      const int64_t off = t * vt + rank * v + row;
      for (int q = 0; q < world; ++q) static_cast<T*>(out.p[q])[off] = val;
    }
    __syncthreads();
  }
  if (threadIdx.x < world) {
    __threadfence_system();
    kf_signal(pads.p[threadIdx.x] + kDoneBase + blockIdx.x * world + rank, epoch);
    kf_wait(pads.p[rank] + kDoneBase + blockIdx.x * world + threadIdx.x, epoch);
  }
}

template <typename T>
int Launch(kf_ctx* ctx, State* st) {
  const kf_tensor& h = *kf_input(ctx, "h");
  const kf_tensor& w = *kf_input(ctx, "w");
  const kf_tensor& bias = *kf_input(ctx, "bias");
  const kf_tensor& logits = *kf_output(ctx, "logits");
  const int world = ctx->world_size;
  const int64_t tokens = h.shape[0], hid = h.shape[1], v = w.shape[0];
  if (tokens > kMaxTokens) return 2;
  Ptrs out;
  Pads pads;
  for (int q = 0; q < kMaxWorld; ++q) {
    out.p[q] = q < world ? logits.peers[q] : nullptr;
    pads.p[q] = q < world ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
  }
  const uint32_t epoch = ++st->epoch;
  // Depends only on values every rank shares, so block b exists on every rank.
  const int64_t tiles = (v + kTile - 1) / kTile;
  const int blocks = static_cast<int>(tiles < st->max_blocks ? tiles : st->max_blocks);
  const bool vec = hid % Elem<T>::kN == 0;
  if (vec)
    GemvGather<T, true><<<blocks, kThreads, 0, ctx->stream>>>(
        static_cast<const T*>(h.data), static_cast<const T*>(w.data),
        static_cast<const T*>(bias.data), out, pads, ctx->rank, world, epoch,
        static_cast<int>(tokens), hid, v);
  else
    GemvGather<T, false><<<blocks, kThreads, 0, ctx->stream>>>(
        static_cast<const T*>(h.data), static_cast<const T*>(w.data),
        static_cast<const T*>(bias.data), out, pads, ctx->rank, world, epoch,
        static_cast<int>(tokens), hid, v);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size > kMaxWorld) return 1;
  if (ctx->signal_pad.nbytes < sizeof(uint32_t) * 2 * kDoneBase) return 1;
  State* st = new State;
  ctx->user = st;
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  // Two resident blocks per SM on a GPU of its own; a share of the SMs when ranks share one.
  st->max_blocks = ctx->emulated ? sms / (2 * ctx->world_size) : 2 * sms;
  if (st->max_blocks > kMaxBlocks) st->max_blocks = kMaxBlocks;
  if (st->max_blocks < 1) st->max_blocks = 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr || kf_input(ctx, "h") == nullptr || kf_input(ctx, "w") == nullptr ||
      kf_input(ctx, "bias") == nullptr || kf_output(ctx, "logits") == nullptr)
    return 1;
  switch (kf_input(ctx, "h")->dtype) {
    case KF_BF16:
      return Launch<__nv_bfloat16>(ctx, st);
    case KF_F32:
      return Launch<float>(ctx, st);
    default:
      return 2;
  }
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  delete static_cast<State*>(ctx->user);
  ctx->user = nullptr;
  return 0;
}
