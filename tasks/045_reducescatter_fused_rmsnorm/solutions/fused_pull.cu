// Reduce-scatter + RMSNorm in one kernel: the reduction is done by peer loads
// and the row is normalised in the same pass, so the reduced block never goes
// through HBM. Block b handles rows b, b+G, ... of this rank's block: it loads
// the row from every rank's x (16-byte loads, fp32 sums), keeps the mean in
// shared memory while it accumulates the sum of squares, then writes
// gamma * s * inv. A per-block start handshake with block b of every peer
// (signal pad, per-block epochs) orders the peer reads after every peer has
// entered the call, as tasks/001_allreduce's one-shot does; nothing a peer
// reads is written here, so no end barrier is needed.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxWorld = 8;  // the task's largest world size; peer loads unroll to it

struct PeerRows {
  const __nv_bfloat16* p[KF_MAX_RANKS];
};
struct PeerPads {
  uint32_t* p[KF_MAX_RANKS];
};

struct State {
  uint32_t* epochs = nullptr;
  int blocks = 0;
};

__device__ float BlockSum(float v) {
  __shared__ float partial[kThreads / 32];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int i = 0; i < kThreads / 32; ++i) s += partial[i];
    total = s;
  }
  __syncthreads();
  const float t = total;
  __syncthreads();
  return t;
}

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

__global__ void __launch_bounds__(kThreads)
    FusedReduceScatterRmsNorm(PeerRows x, const __nv_bfloat16* gamma, __nv_bfloat16* y,
                              int64_t rows, int64_t h, bool vec, float inv_world, float eps,
                              PeerPads pads, uint32_t* epochs, int rank, int world) {
  extern __shared__ float mean[];  // [h]
  __shared__ uint32_t epoch_sh;
  if (threadIdx.x == 0) epoch_sh = epochs[blockIdx.x] + 1;
  __syncthreads();
  const uint32_t epoch = epoch_sh;
  BlockBarrier(pads, rank, world, epoch);  // every peer's x is in place

  const int64_t units = vec ? h / 8 : 0;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t off = (rank * rows + row) * h;  // this row in every rank's x
    float ss = 0.f;
    for (int64_t u = threadIdx.x; u < units; u += kThreads) {
      uint4 v[kMaxWorld];
#pragma unroll
      for (int q = 0; q < kMaxWorld; ++q)
        if (q < world) v[q] = reinterpret_cast<const uint4*>(x.p[q] + off)[u];
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
      for (int q = 0; q < kMaxWorld; ++q) {
        if (q < world) {
          const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&v[q]);
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const float2 f = __bfloat1622float2(b[k]);
            acc[2 * k] += f.x;
            acc[2 * k + 1] += f.y;
          }
        }
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float s = acc[k] * inv_world;
        mean[u * 8 + k] = s;
        ss += s * s;
      }
    }
    for (int64_t c = units * 8 + threadIdx.x; c < h; c += kThreads) {
      float acc = 0.f;
      for (int q = 0; q < world; ++q) acc += __bfloat162float(x.p[q][off + c]);
      const float s = acc * inv_world;
      mean[c] = s;
      ss += s * s;
    }
    // BlockSum's barriers also make every thread's `mean` stores visible.
    const float inv = rsqrtf(BlockSum(ss) / static_cast<float>(h) + eps);
    __nv_bfloat16* out = y + row * h;
    for (int64_t u = threadIdx.x; u < units; u += kThreads) {
      const uint4 g = reinterpret_cast<const uint4*>(gamma)[u];
      const __nv_bfloat162* gb = reinterpret_cast<const __nv_bfloat162*>(&g);
      uint4 o;
      __nv_bfloat162* ob = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 gf = __bfloat1622float2(gb[k]);
        ob[k] = __floats2bfloat162_rn(mean[u * 8 + 2 * k] * inv * gf.x,
                                      mean[u * 8 + 2 * k + 1] * inv * gf.y);
      }
      reinterpret_cast<uint4*>(out)[u] = o;
    }
    for (int64_t c = units * 8 + threadIdx.x; c < h; c += kThreads)
      out[c] = __float2bfloat16_rn(mean[c] * inv * __bfloat162float(gamma[c]));
    __syncthreads();  // `mean` is rewritten by the next row
  }
  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch;
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size > kMaxWorld) return 1;
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  // Same grid on every rank; when ranks share one GPU all grids must be resident.
  int blocks = ctx->emulated ? sms / (2 * ctx->world_size) : sms;
  if (blocks < 1) blocks = 1;
  const size_t pad_blocks = ctx->signal_pad.nbytes / (sizeof(uint32_t) * ctx->world_size);
  if (static_cast<size_t>(blocks) > pad_blocks) blocks = static_cast<int>(pad_blocks);
  const kf_tensor* y = kf_output(ctx, "y");
  if (y == nullptr || y->ndim != 2) return 1;
  const size_t smem = static_cast<size_t>(y->shape[1]) * sizeof(float);
  if (smem > ctx->gpu.smem_per_block_optin) return 1;  // a row must fit in shared memory
  if (cudaFuncSetAttribute(FusedReduceScatterRmsNorm, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem)) != cudaSuccess)
    return 1;
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
  const kf_tensor* x = kf_input(ctx, "x");
  const kf_tensor* gamma = kf_input(ctx, "gamma");
  kf_tensor* y = kf_output(ctx, "y");
  if (st == nullptr || x == nullptr || gamma == nullptr || y == nullptr) return 1;
  const int64_t rows = y->shape[0], h = y->shape[1];
  PeerRows xs;
  PeerPads pads;
  bool vec = h % 8 == 0 && Aligned16(gamma->data) && Aligned16(y->data);
  for (int q = 0; q < KF_MAX_RANKS; ++q) {
    xs.p[q] = q < ctx->world_size ? static_cast<const __nv_bfloat16*>(x->peers[q]) : nullptr;
    pads.p[q] = q < ctx->world_size ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
    if (q < ctx->world_size) vec = vec && Aligned16(x->peers[q]);
  }
  const float eps = static_cast<float>(kf_param(ctx, "eps", 1e-5));
  FusedReduceScatterRmsNorm<<<st->blocks, kThreads, h * sizeof(float), ctx->stream>>>(
      xs, static_cast<const __nv_bfloat16*>(gamma->data), static_cast<__nv_bfloat16*>(y->data),
      rows, h, vec, 1.0f / static_cast<float>(ctx->world_size), eps, pads, st->epochs, ctx->rank,
      ctx->world_size);
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
