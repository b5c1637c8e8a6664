// One-shot fused all-reduce + residual add + RMSNorm (TensorRT-LLM's
// kARResidualRMSNorm one-shot pattern). One kernel, one barrier:
//   1. block b of this rank meets block b of every peer through the signal pad
//      (every peer's x is in place);
//   2. for each of its tokens, the block pulls the token's row of x from every
//      rank over NVLink (16-byte loads, all ranks' loads in flight together),
//      sums in fp32 in rank order 0..W-1 (every rank computes the same bits),
//      rounds the sum to bf16, adds the residual and rounds again
//      (residual_out), and keeps the row in registers;
//   3. a block reduction gives the row's mean square; y = r * inv * gamma is
//      written from the registers.
// No intermediate buffer and no second launch: the all-reduce's output never
// goes through HBM before the norm reads it.
//
// Barrier: block b signals slot [b * W + rank] of every peer's pad with an epoch
// that grows by one per call (kept per block in device memory; the pad is zeroed
// only before setup) and waits for the same slots of its own pad. No end
// barrier: the kernel reads only the peers' inputs, which the harness leaves
// alone until every rank has returned, and a peer's next call cannot pass its
// start barrier before this rank has entered its own next call.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 1024;
constexpr int kMaxWorld = 8;
constexpr int kV = 8;        // bf16 per 16-byte vector
constexpr int kMaxVecs = 2;  // vectors a thread keeps in registers: rows up to 16384 wide

using bf16 = __nv_bfloat16;

struct PeerPtrs {
  const bf16* p[kMaxWorld];
};
struct PeerPads {
  uint32_t* p[kMaxWorld];
};

struct Args {
  PeerPtrs x;
  const bf16* residual;
  const bf16* gamma;
  bf16* y;
  bf16* residual_out;
  int64_t rows, h;
  float eps;
  bool vec;  // h % 8 == 0, every pointer 16-byte aligned, h / 8 <= kMaxVecs * kThreads
  PeerPads pads;
  uint32_t* epochs;
  int rank, world;
};

struct State {
  uint32_t* epochs = nullptr;
  int max_blocks = 0;
};

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
  __syncthreads();  // total and partial are reused by the next row
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

// residual_out = bf16(bf16(sum over ranks of x) + residual) for one element.
__device__ __forceinline__ float ResidualOut(const Args& a, int64_t e) {
  float acc = 0.f;
  for (int q = 0; q < a.world; ++q) acc += __bfloat162float(a.x.p[q][e]);
  const float s = __bfloat162float(__float2bfloat16_rn(acc));
  return __bfloat162float(__float2bfloat16_rn(s + __bfloat162float(a.residual[e])));
}

__device__ void VectorRow(const Args& a, int64_t base) {
  const int nvec = static_cast<int>(a.h / kV);
  float r[kMaxVecs][kV];
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kMaxVecs; ++k) {
    const int v = threadIdx.x + k * kThreads;
    if (v >= nvec) continue;
    const int64_t e = base + static_cast<int64_t>(v) * kV;
    uint4 in[kMaxWorld];
#pragma unroll
    for (int q = 0; q < kMaxWorld; ++q) {
      if (q < a.world) in[q] = *reinterpret_cast<const uint4*>(a.x.p[q] + e);
    }
    const uint4 res = *reinterpret_cast<const uint4*>(a.residual + e);
    float acc[kV];
    Unpack(in[0], acc);
#pragma unroll
    for (int q = 1; q < kMaxWorld; ++q) {
      if (q < a.world) {
        float f[kV];
        Unpack(in[q], f);
#pragma unroll
        for (int i = 0; i < kV; ++i) acc[i] += f[i];
      }
    }
    float rf[kV];
    Unpack(res, rf);
#pragma unroll
    for (int i = 0; i < kV; ++i) {
      const float s = __bfloat162float(__float2bfloat16_rn(acc[i]));
      r[k][i] = __bfloat162float(__float2bfloat16_rn(s + rf[i]));
      ss += r[k][i] * r[k][i];
    }
    *reinterpret_cast<uint4*>(a.residual_out + e) = Pack(r[k]);
  }
  const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(a.h) + a.eps);
#pragma unroll
  for (int k = 0; k < kMaxVecs; ++k) {
    const int v = threadIdx.x + k * kThreads;
    if (v >= nvec) continue;
    float g[kV], out[kV];
    Unpack(*reinterpret_cast<const uint4*>(a.gamma + static_cast<int64_t>(v) * kV), g);
#pragma unroll
    for (int i = 0; i < kV; ++i) out[i] = r[k][i] * inv * g[i];
    *reinterpret_cast<uint4*>(a.y + base + static_cast<int64_t>(v) * kV) = Pack(out);
  }
}

// Any width and alignment: element by element, residual_out read back by the
// thread that wrote it.
__device__ void ScalarRow(const Args& a, int64_t base) {
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < a.h; c += kThreads) {
    const float r = ResidualOut(a, base + c);
    a.residual_out[base + c] = __float2bfloat16_rn(r);
    ss += r * r;
  }
  const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(a.h) + a.eps);
  for (int64_t c = threadIdx.x; c < a.h; c += kThreads) {
    const float r = __bfloat162float(a.residual_out[base + c]);
    a.y[base + c] = __float2bfloat16_rn(r * inv * __bfloat162float(a.gamma[c]));
  }
}

__global__ void __launch_bounds__(kThreads) FusedKernel(Args a) {
  const uint32_t epoch = a.epochs[blockIdx.x] + 1;  // read before the barrier's __syncthreads
  BlockBarrier(a.pads, a.rank, a.world, epoch);      // every peer's x is in place
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    if (a.vec)
      VectorRow(a, row * a.h);
    else
      ScalarRow(a, row * a.h);
  }
  if (threadIdx.x == 0) a.epochs[blockIdx.x] = epoch;
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size < 1 || ctx->world_size > kMaxWorld) return 1;
  const kf_tensor* x = kf_input(ctx, "x");
  if (x == nullptr || x->dtype != KF_BF16 || x->ndim != 2) return 1;
  // Co-residency: when ranks share one GPU each rank's grid leaves room for the
  // others' (a spinning grid that fills the GPU starves the peer it waits for).
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
  const kf_tensor* x = kf_input(ctx, "x");
  const kf_tensor* residual = kf_input(ctx, "residual");
  const kf_tensor* gamma = kf_input(ctx, "gamma");
  kf_tensor* y = kf_output(ctx, "y");
  kf_tensor* residual_out = kf_output(ctx, "residual_out");
  if (st == nullptr || x == nullptr || residual == nullptr || gamma == nullptr || y == nullptr ||
      residual_out == nullptr)
    return 1;
  Args a{};
  a.rows = x->shape[0];
  a.h = x->shape[1];
  a.residual = static_cast<const bf16*>(residual->data);
  a.gamma = static_cast<const bf16*>(gamma->data);
  a.y = static_cast<bf16*>(y->data);
  a.residual_out = static_cast<bf16*>(residual_out->data);
  a.eps = static_cast<float>(kf_param(ctx, "eps", 1e-5));
  a.epochs = st->epochs;
  a.rank = ctx->rank;
  a.world = ctx->world_size;
  a.vec = a.h % kV == 0 && a.h / kV <= static_cast<int64_t>(kMaxVecs) * kThreads &&
          Aligned16(a.residual) && Aligned16(a.gamma) && Aligned16(a.y) &&
          Aligned16(a.residual_out);
  for (int q = 0; q < a.world; ++q) {
    a.x.p[q] = static_cast<const bf16*>(x->peers[q]);
    a.pads.p[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
    a.vec = a.vec && Aligned16(a.x.p[q]);
  }
  // The grid depends only on values every rank shares (T, W, the GPU), so
  // block b exists on every rank and the per-block barriers pair up.
  const int blocks = static_cast<int>(a.rows < st->max_blocks ? a.rows : st->max_blocks);
  FusedKernel<<<blocks < 1 ? 1 : blocks, kThreads, 0, ctx->stream>>>(a);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
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
