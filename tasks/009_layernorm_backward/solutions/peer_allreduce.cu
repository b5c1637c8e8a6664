// LayerNorm parameter gradients with the all-reduce folded into the epilogue:
//   kernel 1: this rank's fp32 column partials of dgamma and dbeta into its own
//     workspace (double-buffered by call parity);
//   kernel 2: block b handshakes with block b of every peer, then sums the W
//     partials of its columns by peer loads and writes both outputs rounded to
//     the output dtype: no separate collective, no round trip of the reduced
//     buffer through HBM.
// A peer signals in kernel 2 only after its kernel 1 finished (stream order),
// so every peer's partials are complete once the handshake is over. Partials of
// call n+2 overwrite call n's buffer only after every peer signalled in call
// n+1, i.e. after its call-n reads. The call count is kept on the host: every
// rank makes the same calls after the same kf_setup (which zeroes the pad).
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

struct PeerFloats {
  const float* p[KF_MAX_RANKS];
};
struct PeerPads {
  uint32_t* p[KF_MAX_RANKS];
};

struct State {
  uint32_t calls = 0;
  int blocks = 0;
};

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename T>
__global__ void __launch_bounds__(kThreads)
    ColumnPartials(const T* xh, const T* dy, float* partial, int64_t b, int64_t h,
                   int64_t rows_per_slice) {
  const int64_t c = blockIdx.x * (int64_t)kThreads + threadIdx.x;
  if (c >= h) return;
  const int64_t r0 = blockIdx.y * rows_per_slice;
  const int64_t r1 = r0 + rows_per_slice < b ? r0 + rows_per_slice : b;
  float g = 0.f, s = 0.f;
  for (int64_t i = r0; i < r1; ++i) {
    const float d = ToFloat(dy[i * h + c]);
    g += d * ToFloat(xh[i * h + c]);
    s += d;
  }
  atomicAdd(partial + c, g);
  atomicAdd(partial + h + c, s);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    PeerSum(PeerFloats partial, T* dgamma, T* dbeta, int64_t h, PeerPads pads, uint32_t epoch,
            int rank, int world) {
  __syncthreads();
  if (threadIdx.x < world && threadIdx.x != rank) {
    kf_signal(pads.p[threadIdx.x] + blockIdx.x * world + rank, epoch);
    kf_wait(pads.p[rank] + blockIdx.x * world + threadIdx.x, epoch);
  }
  __syncthreads();
  for (int64_t c = blockIdx.x * (int64_t)kThreads + threadIdx.x; c < 2 * h;
       c += (int64_t)gridDim.x * kThreads) {
    float s = 0.f;
    for (int q = 0; q < world; ++q) s += partial.p[q][c];
    Store(c < h ? dgamma + c : dbeta + (c - h), s);
  }
}

template <typename T>
int Run(kf_ctx* ctx, State* st) {
  const kf_tensor* xh = kf_input(ctx, "x_hat");
  const kf_tensor* dy = kf_input(ctx, "dy");
  kf_tensor* dgamma = kf_output(ctx, "dgamma");
  kf_tensor* dbeta = kf_output(ctx, "dbeta");
  if (xh == nullptr || dy == nullptr || dgamma == nullptr || dbeta == nullptr || xh->ndim != 2)
    return 1;
  const int64_t b = xh->shape[0], h = xh->shape[1];
  if (ctx->workspace.nbytes < 4 * h * sizeof(float)) return 1;
  const uint32_t epoch = ++st->calls;
  const int64_t offset = (epoch & 1) * 2 * h;  // this call's partial buffer
  float* mine = static_cast<float*>(ctx->workspace.data) + offset;
  PeerFloats partial;
  PeerPads pads;
  for (int q = 0; q < KF_MAX_RANKS; ++q) {
    partial.p[q] =
        q < ctx->world_size ? static_cast<const float*>(ctx->workspace.peers[q]) + offset : nullptr;
    pads.p[q] = q < ctx->world_size ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
  }
  const int64_t col_blocks = (h + kThreads - 1) / kThreads;
  int64_t slices = (4 * static_cast<int64_t>(ctx->gpu.sm_count) + col_blocks - 1) / col_blocks;
  if (slices < 1) slices = 1;
  if (slices > b) slices = b;
  if (slices > 65535) slices = 65535;
  const int64_t rows_per_slice = (b + slices - 1) / slices;
  slices = (b + rows_per_slice - 1) / rows_per_slice;
  if (cudaMemsetAsync(mine, 0, 2 * h * sizeof(float), ctx->stream) != cudaSuccess) return 1;
  ColumnPartials<T><<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(slices)),
                      kThreads, 0, ctx->stream>>>(
      static_cast<const T*>(xh->data), static_cast<const T*>(dy->data), mine, b, h, rows_per_slice);
  PeerSum<T><<<st->blocks, kThreads, 0, ctx->stream>>>(partial, static_cast<T*>(dgamma->data),
                                                       static_cast<T*>(dbeta->data), h, pads, epoch,
                                                       ctx->rank, ctx->world_size);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size > kThreads) return 1;
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  // Same grid on every rank; when ranks share one GPU all grids must be resident.
  int blocks = ctx->emulated ? sms / (2 * ctx->world_size) : sms;
  if (blocks < 1) blocks = 1;
  const size_t pad_blocks = ctx->signal_pad.nbytes / (sizeof(uint32_t) * ctx->world_size);
  if (static_cast<size_t>(blocks) > pad_blocks) blocks = static_cast<int>(pad_blocks);
  State* st = new State;
  st->blocks = blocks;
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
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
  delete static_cast<State*>(ctx->user);
  ctx->user = nullptr;
  return 0;
}
