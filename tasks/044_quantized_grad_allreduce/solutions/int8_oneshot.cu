// Quantized gradient all-reduce that moves the int8 values: each rank writes
// its int8 blocks and fp32 scales into its own workspace, and every rank then
// reads every peer's int8 blocks over NVLink, dequantizes them on arrival and
// sums in fp32 straight into its output, in one kernel instead of three.
// One-shot: (W-1) * ~1.03 N bytes reach each rank, against 2(W-1)/W * 4N for
// an all-reduce of the fp32 values: fewer up to W = 4, about the same at 8.
// Quantization block j is handled by the same warp of the same CTA on every
// rank (warp-strided over a grid that depends only on W and the GPU), so CTA b
// reads from each peer only what CTA b of that peer wrote before its
// handshake. The workspace copies are double-buffered by epoch parity: a rank
// rewrites call n's copy in call n+2 only after every peer signalled in call
// n+1, which a peer does after finishing its call-n reads.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

struct PeerBytes {
  char* p[KF_MAX_RANKS];
};
struct PeerPads {
  uint32_t* p[KF_MAX_RANKS];
};

struct State {
  uint32_t* epochs = nullptr;
  int blocks = 0;
};

__global__ void __launch_bounds__(kThreads)
    QuantizeAndSum(const __nv_bfloat16* g, __nv_bfloat16* out, int64_t n, int block, PeerBytes ws,
                   int64_t scales_offset, int64_t copy_stride, PeerPads pads, uint32_t* epochs,
                   int rank, int world) {
  __shared__ uint32_t epoch_sh;
  if (threadIdx.x == 0) epoch_sh = epochs[blockIdx.x] + 1;
  __syncthreads();
  const uint32_t epoch = epoch_sh;
  const int64_t copy = (epoch & 1) * copy_stride;
  const int lane = threadIdx.x & 31;
  const int64_t blocks = (n + block - 1) / block;
  const int64_t first = blockIdx.x * (int64_t)kWarps + threadIdx.x / 32;
  const int64_t stride = (int64_t)gridDim.x * kWarps;

  int8_t* q = reinterpret_cast<int8_t*>(ws.p[rank] + copy);
  float* scales = reinterpret_cast<float*>(ws.p[rank] + copy + scales_offset);
  for (int64_t b = first; b < blocks; b += stride) {
    const int64_t b0 = b * block, b1 = b0 + block < n ? b0 + block : n;
    float amax = 0.f;
    for (int64_t i = b0 + lane; i < b1; i += 32) amax = fmaxf(amax, fabsf(__bfloat162float(g[i])));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = __fdiv_rn(fmaxf(amax, 1e-8f), 127.0f);
    if (lane == 0) scales[b] = scale;
    for (int64_t i = b0 + lane; i < b1; i += 32)
      q[i] = static_cast<int8_t>(
          fminf(fmaxf(rintf(__fdiv_rn(__bfloat162float(g[i]), scale)), -127.f), 127.f));
  }

  __syncthreads();
  if (threadIdx.x < world && threadIdx.x != rank) {
    kf_signal(pads.p[threadIdx.x] + blockIdx.x * world + rank, epoch);
    kf_wait(pads.p[rank] + blockIdx.x * world + threadIdx.x, epoch);
  }
  __syncthreads();

  const float inv_world = 1.0f / static_cast<float>(world);
  for (int64_t b = first; b < blocks; b += stride) {
    const int64_t b0 = b * block, b1 = b0 + block < n ? b0 + block : n;
    for (int64_t i = b0 + lane; i < b1; i += 32) {
      float acc = 0.f;
      for (int p = 0; p < world; ++p) {
        const float s = reinterpret_cast<const float*>(ws.p[p] + copy + scales_offset)[b];
        const int8_t v = reinterpret_cast<const int8_t*>(ws.p[p] + copy)[i];
        acc += __fmul_rn(static_cast<float>(v), s);
      }
      out[i] = __float2bfloat16_rn(acc * inv_world);
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
  const kf_tensor* g = kf_input(ctx, "g");
  kf_tensor* out = kf_output(ctx, "out");
  const int block = static_cast<int>(kf_param(ctx, "block", 128));
  if (st == nullptr || g == nullptr || out == nullptr || block <= 0) return 1;
  const int64_t n = g->numel, blocks = (n + block - 1) / block;
  // One copy: n int8 values, then the scales; two copies (epoch parity).
  const int64_t scales_offset = (n + 255) / 256 * 256;
  const int64_t copy_stride = (scales_offset + blocks * 4 + 255) / 256 * 256;
  if (ctx->workspace.nbytes < static_cast<size_t>(2 * copy_stride)) return 1;
  PeerBytes ws;
  PeerPads pads;
  for (int q = 0; q < KF_MAX_RANKS; ++q) {
    ws.p[q] = q < ctx->world_size ? static_cast<char*>(ctx->workspace.peers[q]) : nullptr;
    pads.p[q] = q < ctx->world_size ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
  }
  QuantizeAndSum<<<st->blocks, kThreads, 0, ctx->stream>>>(
      static_cast<const __nv_bfloat16*>(g->data), static_cast<__nv_bfloat16*>(out->data), n, block,
      ws, scales_offset, copy_stride, pads, st->epochs, ctx->rank, ctx->world_size);
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
