// Row-parallel linear at decode with the all-reduce fused into the GEMV.
//
// B <= 8 (memory-bound): one kernel. Block b computes tiles of 64 outputs
// (8 warps x 8 rows of w, all B tokens at once, w read once with 16-byte
// streaming loads, fp32 accumulation) and pushes each finished tile of fp32
// partial sums into slot [rank] of EVERY rank's workspace (peer stores), then
// raises that tile's flag in every rank's pad. The links carry a tile while the
// next one is computed. Once all its tiles are pushed, the block waits for the
// same tiles' flags from every peer and sums the W partials it received in
// fp32, in rank order 0..W-1 (so every rank writes the same bits), into y.
//
// B > 8 (the weight is reused enough for tensor cores to matter): cuBLAS GEMM
// with an fp32 output into this rank's workspace, then a one-shot all-reduce
// kernel that, after a per-block flag barrier, pulls every peer's fp32 partial
// and writes the bf16 sum (vLLM's path: cuBLAS + custom all-reduce).
//
// Safety across calls: the workspace is double-buffered by call parity. A rank
// writes parity p in call n; a peer reads parity p of call n until it has
// finished call n, and a rank cannot reach call n + 2 (parity p again) before
// every peer has entered call n + 1 (it waits for their flags or barrier of
// call n + 1), i.e. finished call n. Flags and barriers carry the call number
// (every rank makes the same calls), and the pad is zeroed only before setup.
// The fused grid is small enough for every block of every rank to be resident
// (one block per SM; a share of the SMs when ranks share a GPU), so the waits
// at the end always make progress.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kMaxWorld = 8;
constexpr int kThreads = 256;  // fused kernel: 8 warps
constexpr int kRowsPerWarp = 8;
constexpr int kTile = (kThreads / 32) * kRowsPerWarp;  // outputs per tile
constexpr int kMaxFusedBatch = 8;
constexpr int kV = 8;  // bf16 per 16-byte vector
constexpr int kArThreads = 512;
constexpr int kArBlockLimit = 36;
constexpr int kArPadBase = 8192;  // pad slots: per-tile flags below, all-reduce barrier above
constexpr size_t kCublasWorkspace = 4u << 20;

using bf16 = __nv_bfloat16;

struct Ptrs {
  float* p[kMaxWorld];
};
struct Pads {
  uint32_t* p[kMaxWorld];
};

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
  uint32_t epoch = 0;  // calls made
  int fused_blocks = 1;
  int ar_blocks = 1;
};

__device__ __forceinline__ void Unpack(const uint4& v, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

// Workspace layout of the fused path: [parity][source rank][batch][n] fp32.
template <int kB, bool kVec>
__global__ void __launch_bounds__(kThreads, 1)
    GemvPush(const bf16* __restrict__ x, const bf16* __restrict__ w, bf16* __restrict__ y,
             Ptrs ws, Pads pads, int rank, int world, uint32_t epoch, int batch, int64_t n,
             int64_t kr) {
  __shared__ float res[kB][kTile];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t tiles = (n + kTile - 1) / kTile;
  const int64_t slot = static_cast<int64_t>(batch) * n;
  const int64_t parity_base = static_cast<int64_t>(epoch & 1u) * world * slot;

  // Phase 1: compute and push every tile of this block.
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t row0 = tile * kTile + warp * kRowsPerWarp;
    float acc[kRowsPerWarp][kB];
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
#pragma unroll
      for (int b = 0; b < kB; ++b) acc[rr][b] = 0.f;
    }
    if (kVec) {
      for (int64_t k = static_cast<int64_t>(lane) * kV; k < kr; k += 32 * kV) {
        uint4 wv[kRowsPerWarp];
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr) {
          const int64_t row = row0 + rr;
          wv[rr] = row < n ? __ldcs(reinterpret_cast<const uint4*>(w + row * kr + k))
                           : make_uint4(0, 0, 0, 0);
        }
        float xf[kB][kV];
#pragma unroll
        for (int b = 0; b < kB; ++b) {
          const uint4 xv = b < batch ? __ldg(reinterpret_cast<const uint4*>(x + b * kr + k))
                                     : make_uint4(0, 0, 0, 0);
          Unpack(xv, xf[b]);
        }
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr) {
          float wf[kV];
          Unpack(wv[rr], wf);
#pragma unroll
          for (int b = 0; b < kB; ++b) {
#pragma unroll
            for (int i = 0; i < kV; ++i) acc[rr][b] += wf[i] * xf[b][i];
          }
        }
      }
    } else {
      for (int64_t k = lane; k < kr; k += 32) {
        float xf[kB];
#pragma unroll
        for (int b = 0; b < kB; ++b) xf[b] = b < batch ? __bfloat162float(x[b * kr + k]) : 0.f;
#pragma unroll
        for (int rr = 0; rr < kRowsPerWarp; ++rr) {
          const int64_t row = row0 + rr;
          const float wf = row < n ? __bfloat162float(w[row * kr + k]) : 0.f;
#pragma unroll
          for (int b = 0; b < kB; ++b) acc[rr][b] += wf * xf[b];
        }
      }
    }
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
#pragma unroll
      for (int b = 0; b < kB; ++b) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[rr][b] += __shfl_xor_sync(0xffffffffu, acc[rr][b], o);
      }
    }
    if (lane == 0) {
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
#pragma unroll
        for (int b = 0; b < kB; ++b) res[b][warp * kRowsPerWarp + rr] = acc[rr][b];
      }
    }
    __syncthreads();
    const int64_t src_base = parity_base + static_cast<int64_t>(rank) * slot;
    for (int e = threadIdx.x; e < batch * kTile; e += kThreads) {
      const int b = e / kTile, j = e % kTile;
      const int64_t col = tile * kTile + j;
      if (col >= n) continue;
      const float v = res[b][j];
      const int64_t off = src_base + b * n + col;
      for (int q = 0; q < world; ++q) ws.p[q][off] = v;
    }
    __syncthreads();  // the whole tile is stored before its flag; res is free again
    if (threadIdx.x < world) {
      __threadfence_system();
      kf_signal(pads.p[threadIdx.x] + tile * world + rank, epoch);
    }
  }

  // Phase 2: sum the arrived partials of the same tiles.
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    if (threadIdx.x < world) kf_wait(pads.p[rank] + tile * world + threadIdx.x, epoch);
    __syncthreads();
    const float* own = ws.p[rank] + parity_base;
    for (int e = threadIdx.x; e < batch * kTile; e += kThreads) {
      const int b = e / kTile, j = e % kTile;
      const int64_t col = tile * kTile + j;
      if (col >= n) continue;
      float s = 0.f;
      for (int q = 0; q < world; ++q) s += __ldcg(own + q * slot + b * n + col);
      y[b * n + col] = __float2bfloat16_rn(s);
    }
  }
}

// One-shot all-reduce of the fp32 partials in every rank's workspace (at
// parity `parity`): a per-block barrier, then y = bf16(sum over ranks), fp32 in
// rank order.
__global__ void __launch_bounds__(kArThreads)
    OneShotF32(Ptrs part, bf16* __restrict__ y, int64_t count, bool vec, Pads pads, int rank,
               int world, uint32_t epoch) {
  __syncthreads();
  const int peer = threadIdx.x;
  if (peer < world && peer != rank) {
    kf_signal(pads.p[peer] + kArPadBase + blockIdx.x * world + rank, epoch);
    kf_wait(pads.p[rank] + kArPadBase + blockIdx.x * world + peer, epoch);
  }
  __syncthreads();
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (vec) {
    for (int64_t u = first; u < count / 4; u += stride) {
      float4 v[kMaxWorld];
#pragma unroll
      for (int q = 0; q < kMaxWorld; ++q) {
        if (q < world) v[q] = reinterpret_cast<const float4*>(part.p[q])[u];
      }
      float4 s = v[0];
#pragma unroll
      for (int q = 1; q < kMaxWorld; ++q) {
        if (q < world) {
          s.x += v[q].x;
          s.y += v[q].y;
          s.z += v[q].z;
          s.w += v[q].w;
        }
      }
      __nv_bfloat162 lo = __floats2bfloat162_rn(s.x, s.y), hi = __floats2bfloat162_rn(s.z, s.w);
      uint2 out;
      out.x = *reinterpret_cast<uint32_t*>(&lo);
      out.y = *reinterpret_cast<uint32_t*>(&hi);
      reinterpret_cast<uint2*>(y)[u] = out;
    }
  } else {
    for (int64_t i = first; i < count; i += stride) {
      float s = 0.f;
      for (int q = 0; q < world; ++q) s += part.p[q][i];
      y[i] = __float2bfloat16_rn(s);
    }
  }
}

template <int kB>
void LaunchFused(bool vec, int blocks, cudaStream_t stream, const bf16* x, const bf16* w, bf16* y,
                 const Ptrs& ws, const Pads& pads, int rank, int world, uint32_t epoch, int batch,
                 int64_t n, int64_t kr) {
  if (vec)
    GemvPush<kB, true><<<blocks, kThreads, 0, stream>>>(x, w, y, ws, pads, rank, world, epoch,
                                                        batch, n, kr);
  else
    GemvPush<kB, false><<<blocks, kThreads, 0, stream>>>(x, w, y, ws, pads, rank, world, epoch,
                                                         batch, n, kr);
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

int RunFused(kf_ctx* ctx, State* st, const kf_tensor& x, const kf_tensor& w, kf_tensor& y,
             uint32_t epoch) {
  const int world = ctx->world_size;
  const int batch = static_cast<int>(x.shape[0]);
  const int64_t kr = x.shape[1], n = w.shape[0];
  const int64_t tiles = (n + kTile - 1) / kTile;
  if (tiles * world > kArPadBase) return 2;
  Ptrs ws{};
  Pads pads{};
  for (int q = 0; q < world; ++q) {
    ws.p[q] = static_cast<float*>(ctx->workspace.peers[q]);
    pads.p[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
  }
  const bool vec = kr % kV == 0 && Aligned16(x.data) && Aligned16(w.data);
  // Depends only on values every rank shares, so block b exists on every rank.
  const int blocks = static_cast<int>(tiles < st->fused_blocks ? tiles : st->fused_blocks);
  const auto* xp = static_cast<const bf16*>(x.data);
  const auto* wp = static_cast<const bf16*>(w.data);
  auto* yp = static_cast<bf16*>(y.data);
  if (batch <= 1)
    LaunchFused<1>(vec, blocks, ctx->stream, xp, wp, yp, ws, pads, ctx->rank, world, epoch, batch,
                   n, kr);
  else if (batch <= 2)
    LaunchFused<2>(vec, blocks, ctx->stream, xp, wp, yp, ws, pads, ctx->rank, world, epoch, batch,
                   n, kr);
  else if (batch <= 4)
    LaunchFused<4>(vec, blocks, ctx->stream, xp, wp, yp, ws, pads, ctx->rank, world, epoch, batch,
                   n, kr);
  else
    LaunchFused<8>(vec, blocks, ctx->stream, xp, wp, yp, ws, pads, ctx->rank, world, epoch, batch,
                   n, kr);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

int RunCublasOneShot(kf_ctx* ctx, State* st, const kf_tensor& x, const kf_tensor& w,
                     kf_tensor& y, uint32_t epoch) {
  const int world = ctx->world_size;
  const int64_t b = x.shape[0], kr = x.shape[1], n = w.shape[0];
  const int64_t count = b * n;
  const int64_t parity_off = static_cast<int64_t>(epoch & 1u) * count;
  float* partial = static_cast<float*>(ctx->workspace.data) + parity_off;
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  // Row-major partial[B, N] = x[B, Kr] @ w[N, Kr]^T is column-major partial^T = w x^T (w is
  // column-major [Kr, N], op T; x is column-major [Kr, B]); bf16 in, fp32 out.
  const float alpha = 1.0f, beta = 0.0f;
  if (cublasGemmEx(st->handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(b),
                   static_cast<int>(kr), &alpha, w.data, CUDA_R_16BF, static_cast<int>(kr), x.data,
                   CUDA_R_16BF, static_cast<int>(kr), &beta, partial, CUDA_R_32F,
                   static_cast<int>(n), CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
    return 1;
  Ptrs part{};
  Pads pads{};
  bool vec = count % 4 == 0 && (reinterpret_cast<uintptr_t>(y.data) & 7) == 0;
  for (int q = 0; q < world; ++q) {
    part.p[q] = static_cast<float*>(ctx->workspace.peers[q]) + parity_off;
    pads.p[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
    vec = vec && Aligned16(part.p[q]);
  }
  const int64_t units = vec ? count / 4 : count;
  int64_t blocks = (units + kArThreads - 1) / kArThreads;
  if (blocks > st->ar_blocks) blocks = st->ar_blocks;
  if (blocks < 1) blocks = 1;
  OneShotF32<<<static_cast<int>(blocks), kArThreads, 0, ctx->stream>>>(
      part, static_cast<bf16*>(y.data), count, vec, pads, ctx->rank, world, epoch);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size < 1 || ctx->world_size > kMaxWorld) return 1;
  if (ctx->signal_pad.nbytes < sizeof(uint32_t) * (kArPadBase + kArBlockLimit * kMaxWorld))
    return 1;
  State* st = new State;
  ctx->user = st;
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  // Every block resident: one per SM, or a share of the SMs when ranks share a GPU.
  st->fused_blocks = ctx->emulated ? sms / (2 * ctx->world_size) : sms;
  if (st->fused_blocks < 1) st->fused_blocks = 1;
  st->ar_blocks = ctx->emulated ? sms / (2 * ctx->world_size) : kArBlockLimit;
  if (st->ar_blocks > kArBlockLimit) st->ar_blocks = kArBlockLimit;
  if (st->ar_blocks < 1) st->ar_blocks = 1;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor* x = kf_input(ctx, "x");
  const kf_tensor* w = kf_input(ctx, "w");
  kf_tensor* y = kf_output(ctx, "y");
  if (st == nullptr || x == nullptr || w == nullptr || y == nullptr || x->dtype != KF_BF16)
    return 1;
  const int64_t b = x->shape[0], n = w->shape[0];
  const size_t need = 2 * static_cast<size_t>(ctx->world_size) * static_cast<size_t>(b * n) *
                      sizeof(float);
  if (ctx->workspace.nbytes < need) return 1;
  const uint32_t epoch = ++st->epoch;
  return b <= kMaxFusedBatch ? RunFused(ctx, st, *x, *w, *y, epoch)
                             : RunCublasOneShot(ctx, st, *x, *w, *y, epoch);
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (st->handle != nullptr && cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  if (st->cublas_ws != nullptr && cudaFree(st->cublas_ws) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
