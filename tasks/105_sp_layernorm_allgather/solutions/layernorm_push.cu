// Sequence-parallel LayerNorm whose output is the all-gather: every block
// normalises rows of this rank's shard (fp32 statistics over the row kept in
// registers, one bf16 rounding) and stores each row straight into EVERY rank's
// y at row rank*R + i (peer stores over NVLink, this rank's own y included).
// No local copy of the shard and no second kernel: the links carry each row
// once while the next rows are normalised (the technique of Transformer
// Engine's ub_overlap_ag, where the LayerNorm writes into the communication
// buffer).
//
// Ordering, per block b (the grid is the same on every rank, so block b exists
// everywhere):
//   - on entry it raises flag [b*W + rank] in every peer's pad (this call's
//     number); before its first store into any peer's y it waits for every
//     peer's block b to have raised its flag, i.e. for every peer to be inside
//     this call, after the harness reset that peer's output;
//   - after its last store it raises flag [kDoneBase + b*W + rank] in every
//     peer's pad and waits for the same from every peer, so no rank returns
//     while a peer still writes into its y (the kernel ends when all of its
//     blocks have seen all peers' blocks finish).
// The grid is small enough for every block of every rank to be resident (one
// block per SM; a share of the SMs when ranks share a GPU), so the waits always
// make progress.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kMaxWorld = 8;
constexpr int kThreads = 512;
constexpr int kV = 8;        // bf16 per 16-byte vector
constexpr int kMaxVecs = 4;  // vectors a thread keeps in registers: rows up to 16384 wide
constexpr int kDoneBase = 8192;  // pad slots: entry flags below, completion flags above

using bf16 = __nv_bfloat16;

struct Outs {
  bf16* p[kMaxWorld];
};
struct Pads {
  uint32_t* p[kMaxWorld];
};

struct Args {
  const bf16* x;
  const bf16* gamma;
  const bf16* beta;
  Outs y;
  Pads pads;
  int64_t rows, h;
  float eps;
  bool vec;  // h % 8 == 0, h / 8 <= kMaxVecs * kThreads, every pointer 16-byte aligned
  int rank, world;
  uint32_t epoch;
};

struct State {
  uint32_t epoch = 0;  // calls made; every rank makes the same calls
  int max_blocks = 1;
};

__device__ float BlockSum(float v) {
  __shared__ float partial[kThreads / 32];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < kThreads / 32 ? partial[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) total = s;
  }
  __syncthreads();
  const float t = total;
  __syncthreads();  // total and partial are reused by the next reduction
  return t;
}

__device__ __forceinline__ void Unpack(const uint4& v, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

__device__ __forceinline__ uint4 Pack(const float* f) {
  uint4 v;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

// Row i of this rank's shard into row rank*R + i of every rank's y.
__device__ void VectorRow(const Args& a, int64_t i) {
  const int nvec = static_cast<int>(a.h / kV);
  const bf16* xr = a.x + i * a.h;
  float v[kMaxVecs][kV];
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < kMaxVecs; ++k) {
    const int u = threadIdx.x + k * kThreads;
    if (u >= nvec) continue;
    Unpack(*reinterpret_cast<const uint4*>(xr + static_cast<int64_t>(u) * kV), v[k]);
#pragma unroll
    for (int e = 0; e < kV; ++e) s += v[k][e];
  }
  const float mu = BlockSum(s) / static_cast<float>(a.h);
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kMaxVecs; ++k) {
    if (static_cast<int>(threadIdx.x) + k * kThreads >= nvec) continue;
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      const float d = v[k][e] - mu;
      ss += d * d;
    }
  }
  const float rstd = rsqrtf(BlockSum(ss) / static_cast<float>(a.h) + a.eps);
  const int64_t dst = (static_cast<int64_t>(a.rank) * a.rows + i) * a.h;
#pragma unroll
  for (int k = 0; k < kMaxVecs; ++k) {
    const int u = threadIdx.x + k * kThreads;
    if (u >= nvec) continue;
    float g[kV], b[kV], out[kV];
    Unpack(*reinterpret_cast<const uint4*>(a.gamma + static_cast<int64_t>(u) * kV), g);
    Unpack(*reinterpret_cast<const uint4*>(a.beta + static_cast<int64_t>(u) * kV), b);
#pragma unroll
    for (int e = 0; e < kV; ++e) out[e] = (v[k][e] - mu) * rstd * g[e] + b[e];
    const uint4 packed = Pack(out);
    for (int q = 0; q < a.world; ++q)
      *reinterpret_cast<uint4*>(a.y.p[q] + dst + static_cast<int64_t>(u) * kV) = packed;
  }
}

// Any width and alignment: element by element, x read again for each pass.
__device__ void ScalarRow(const Args& a, int64_t i) {
  const bf16* xr = a.x + i * a.h;
  float s = 0.f;
  for (int64_t c = threadIdx.x; c < a.h; c += kThreads) s += __bfloat162float(xr[c]);
  const float mu = BlockSum(s) / static_cast<float>(a.h);
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < a.h; c += kThreads) {
    const float d = __bfloat162float(xr[c]) - mu;
    ss += d * d;
  }
  const float rstd = rsqrtf(BlockSum(ss) / static_cast<float>(a.h) + a.eps);
  const int64_t dst = (static_cast<int64_t>(a.rank) * a.rows + i) * a.h;
  for (int64_t c = threadIdx.x; c < a.h; c += kThreads) {
    const float v = (__bfloat162float(xr[c]) - mu) * rstd * __bfloat162float(a.gamma[c]) +
                    __bfloat162float(a.beta[c]);
    const bf16 out = __float2bfloat16_rn(v);
    for (int q = 0; q < a.world; ++q) a.y.p[q][dst + c] = out;
  }
}

__global__ void __launch_bounds__(kThreads, 1) LayerNormPush(Args a) {
  const int peer = threadIdx.x;
  const bool talks = peer < a.world;
  // Entry: this rank is inside the call (its y was reset before the kernel).
  if (talks) kf_signal(a.pads.p[peer] + blockIdx.x * a.world + a.rank, a.epoch);
  bool peers_in = false;
  for (int64_t i = blockIdx.x; i < a.rows; i += gridDim.x) {
    if (!peers_in) {
      // The row's statistics need no peer; only the stores do, so the wait
      // overlaps with nothing but the first row's loads. Every peer's y has
      // been reset for this call once its block b has raised its flag.
      if (talks) kf_wait(a.pads.p[a.rank] + blockIdx.x * a.world + peer, a.epoch);
      __syncthreads();
      peers_in = true;
    }
    if (a.vec)
      VectorRow(a, i);
    else
      ScalarRow(a, i);
  }
  if (!peers_in) {
    // A block without rows still pairs with its peers, so that flags never lag.
    if (talks) kf_wait(a.pads.p[a.rank] + blockIdx.x * a.world + peer, a.epoch);
  }
  __syncthreads();  // every store of this block precedes the completion flags
  if (talks) {
    __threadfence_system();
    kf_signal(a.pads.p[peer] + kDoneBase + blockIdx.x * a.world + a.rank, a.epoch);
    kf_wait(a.pads.p[a.rank] + kDoneBase + blockIdx.x * a.world + peer, a.epoch);
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size < 1 || ctx->world_size > kMaxWorld) return 1;
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int max_blocks = ctx->emulated ? sms / (2 * ctx->world_size) : sms;
  if (max_blocks < 1) max_blocks = 1;
  // Entry flags below kDoneBase, completion flags above it: W slots per block each.
  const int pad_blocks = kDoneBase / ctx->world_size;
  if (max_blocks > pad_blocks) max_blocks = pad_blocks;
  if (ctx->signal_pad.nbytes < sizeof(uint32_t) * 2 * kDoneBase) return 1;
  State* st = new State;
  st->max_blocks = max_blocks;
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor* x = kf_input(ctx, "x");
  const kf_tensor* gamma = kf_input(ctx, "gamma");
  const kf_tensor* beta = kf_input(ctx, "beta");
  kf_tensor* y = kf_output(ctx, "y");
  if (st == nullptr || x == nullptr || gamma == nullptr || beta == nullptr || y == nullptr ||
      x->ndim != 2 || x->dtype != KF_BF16)
    return 1;
  Args a{};
  a.x = static_cast<const bf16*>(x->data);
  a.gamma = static_cast<const bf16*>(gamma->data);
  a.beta = static_cast<const bf16*>(beta->data);
  a.rows = x->shape[0];
  a.h = x->shape[1];
  a.eps = static_cast<float>(kf_param(ctx, "eps", 1e-5));
  a.rank = ctx->rank;
  a.world = ctx->world_size;
  a.epoch = ++st->epoch;
  a.vec = a.h % kV == 0 && a.h / kV <= static_cast<int64_t>(kMaxVecs) * kThreads &&
          Aligned16(a.x) && Aligned16(a.gamma) && Aligned16(a.beta);
  for (int q = 0; q < a.world; ++q) {
    a.y.p[q] = static_cast<bf16*>(y->peers[q]);
    a.pads.p[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
    a.vec = a.vec && Aligned16(a.y.p[q]);
  }
  // Depends only on values every rank shares (R, W, the GPU), so block b
  // exists on every rank and the flags pair up.
  const int blocks = static_cast<int>(a.rows < st->max_blocks ? a.rows : st->max_blocks);
  LayerNormPush<<<blocks < 1 ? 1 : blocks, kThreads, 0, ctx->stream>>>(a);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  const int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
