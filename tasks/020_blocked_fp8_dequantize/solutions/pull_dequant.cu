// Blocked fp8 dequantization + all-to-all in one kernel that moves 1-byte
// data: rank r reads chunk r of every peer's fp8 y (and its scales) over
// NVLink and dequantizes on arrival straight into row block p of its output,
// a quarter of the link bytes of an all-to-all of the fp32 results and no fp32
// round trip through HBM. A per-block start handshake (signal pad, per-block
// epochs) orders the peer reads after every peer has entered the call, as
// tasks/001_allreduce's one-shot does; nothing a peer reads is written here.
#include <cuda_fp8.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kUnit = 16;  // fp8 values per 16-byte load; divides the 128-element block

struct PeerPtrs {
  const char* p[KF_MAX_RANKS];
};
struct PeerPads {
  uint32_t* p[KF_MAX_RANKS];
};

struct State {
  uint32_t* epochs = nullptr;
  int blocks = 0;
};

__global__ void __launch_bounds__(kThreads)
    PullDequantize(PeerPtrs y, PeerPtrs s, float* out, int64_t chunk, int block, PeerPads pads,
                   uint32_t* epochs, int rank, int world) {
  __shared__ uint32_t epoch_sh;
  if (threadIdx.x == 0) epoch_sh = epochs[blockIdx.x] + 1;
  __syncthreads();
  const uint32_t epoch = epoch_sh;
  if (threadIdx.x < world && threadIdx.x != rank) {
    kf_signal(pads.p[threadIdx.x] + blockIdx.x * world + rank, epoch);
    kf_wait(pads.p[rank] + blockIdx.x * world + threadIdx.x, epoch);
  }
  __syncthreads();

  const int64_t units = chunk / kUnit;
  const int64_t first = blockIdx.x * (int64_t)kThreads + threadIdx.x;
  const int64_t stride = (int64_t)gridDim.x * kThreads;
  for (int k = 0; k < world; ++k) {
    const int src = (rank + 1 + k) % world;  // spread the ranks' reads over the peers
    const uint8_t* ys = reinterpret_cast<const uint8_t*>(y.p[src]) + rank * chunk;
    const float* ss = reinterpret_cast<const float*>(s.p[src]) + rank * (chunk / block);
    float* dst = out + src * chunk;
    for (int64_t u = first; u < units; u += stride) {
      const uint4 packed = reinterpret_cast<const uint4*>(ys)[u];
      const float scale = ss[u * kUnit / block];
      const uint8_t* b = reinterpret_cast<const uint8_t*>(&packed);
      float v[kUnit];
#pragma unroll
      for (int j = 0; j < kUnit; ++j) {
        __nv_fp8_e4m3 q;
        q.__x = b[j];
        v[j] = static_cast<float>(q) * scale;
      }
      float4* o = reinterpret_cast<float4*>(dst + u * kUnit);
#pragma unroll
      for (int j = 0; j < kUnit / 4; ++j)
        o[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
    }
  }
  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size > kThreads) return 1;
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  // Same grid on every rank; when ranks share one GPU all grids must be resident.
  int blocks = ctx->emulated ? sms / (2 * ctx->world_size) : 2 * sms;
  if (blocks < 1) blocks = 1;
  const size_t pad_blocks = ctx->signal_pad.nbytes / (sizeof(uint32_t) * ctx->world_size);
  if (static_cast<size_t>(blocks) > pad_blocks) blocks = static_cast<int>(pad_blocks);
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
  const kf_tensor* y = kf_input(ctx, "y");
  const kf_tensor* s = kf_input(ctx, "s");
  kf_tensor* out = kf_output(ctx, "out");
  const int block = static_cast<int>(kf_param(ctx, "block", 128));
  if (st == nullptr || y == nullptr || s == nullptr || out == nullptr) return 1;
  const int64_t chunk = y->numel / ctx->world_size;
  // Whole 16-byte units that never straddle a scale block, and 16-byte aligned
  // chunk starts in y and out.
  if (block <= 0 || block % kUnit != 0 || chunk % block != 0) return 1;
  PeerPtrs yp, sp;
  PeerPads pads;
  for (int q = 0; q < KF_MAX_RANKS; ++q) {
    yp.p[q] = q < ctx->world_size ? static_cast<const char*>(y->peers[q]) : nullptr;
    sp.p[q] = q < ctx->world_size ? static_cast<const char*>(s->peers[q]) : nullptr;
    pads.p[q] = q < ctx->world_size ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
  }
  PullDequantize<<<st->blocks, kThreads, 0, ctx->stream>>>(yp, sp, static_cast<float*>(out->data),
                                                           chunk, block, pads, st->epochs,
                                                           ctx->rank, ctx->world_size);
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
