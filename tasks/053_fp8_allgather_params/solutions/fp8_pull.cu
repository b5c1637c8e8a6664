// fp8 all-gather that moves 1-byte data: each rank quantizes its shard to e4m3
// in its own workspace, and every rank pulls the peers' fp8 bytes over NVLink
// and dequantizes them on arrival (half the link bytes of a bf16 all-gather).
//   kernel 1: amax of the shard (atomicMax of the float bits).
//   kernel 2: every block derives the scale from the updated history, block 0
//     writes hist_out, block b quantizes its units of the shard into the
//     workspace and publishes the scale in its slot; block b then handshakes
//     with block b of every peer and pulls the same units from each peer,
//     dequantizing with that peer's scale straight into `full`.
// Units (16 elements) go to blocks the same way on every rank, so block b only
// reads what block b of each peer wrote before signalling. The fp8 copies and
// the scales are double-buffered by epoch parity: a rank writes call n+2's
// copy only after every peer signalled in call n+1, which a peer does only
// after finishing its call-n reads.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kHistory = 16;
constexpr int kUnit = 16;  // elements per unit: 16 fp8 bytes = one 16-byte load
constexpr int kMaxBlocks = 1024;
// Workspace layout: amax bits (local), scales[2][kMaxBlocks], then two fp8 copies.
constexpr size_t kScalesOffset = 256;
constexpr size_t kCopiesOffset = kScalesOffset + 2 * kMaxBlocks * sizeof(float);

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
    Amax(const __nv_bfloat16* p, int64_t n, unsigned* amax_bits) {
  float m = 0.f;
  for (int64_t i = blockIdx.x * (int64_t)kThreads + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * kThreads)
    m = fmaxf(m, fabsf(__bfloat162float(p[i])));
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) atomicMax(amax_bits, __float_as_uint(m));
}

__device__ __forceinline__ uint8_t Quantize(__nv_bfloat16 x, float s) {
  return __nv_cvt_float_to_fp8(__fdiv_rn(__bfloat162float(x), s), __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ __nv_bfloat16 Dequantize(uint8_t q, float s) {
  __nv_fp8_e4m3 v;
  v.__x = q;
  return __float2bfloat16_rn(__fmul_rn(static_cast<float>(v), s));
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
    QuantizeAndPull(const __nv_bfloat16* p, int64_t n, const __nv_bfloat16* hist,
                    __nv_bfloat16* hist_out, __nv_bfloat16* full, bool vec_rows, PeerBytes ws,
                    int64_t copy_stride, PeerPads pads, uint32_t* epochs, int rank, int world) {
  __shared__ float scale_sh;
  __shared__ uint32_t epoch_sh;
  if (threadIdx.x == 0) {
    epoch_sh = epochs[blockIdx.x] + 1;
    const unsigned amax_bits = *reinterpret_cast<const unsigned*>(ws.p[rank]);
    float a = __bfloat162float(__float2bfloat16_rn(1e-12f));
    for (int j = 0; j < kHistory; ++j) {
      const __nv_bfloat16 v =
          j + 1 < kHistory ? hist[j + 1] : __float2bfloat16_rn(__uint_as_float(amax_bits));
      if (blockIdx.x == 0) hist_out[j] = v;
      a = fmaxf(a, __bfloat162float(v));
    }
    scale_sh = __fdiv_rn(a, 448.0f);
  }
  __syncthreads();
  const uint32_t epoch = epoch_sh;
  const int parity = epoch & 1;
  const float s = scale_sh;
  const size_t copy_offset = kCopiesOffset + parity * copy_stride;
  uint8_t* mine = reinterpret_cast<uint8_t*>(ws.p[rank] + copy_offset);
  if (threadIdx.x == 0)
    reinterpret_cast<float*>(ws.p[rank] + kScalesOffset)[parity * kMaxBlocks + blockIdx.x] = s;

  const int64_t units = (n + kUnit - 1) / kUnit;
  const int64_t first = blockIdx.x * (int64_t)kThreads + threadIdx.x;
  const int64_t stride = (int64_t)gridDim.x * kThreads;

  // Quantize this block's units of the shard.
  for (int64_t u = first; u < units; u += stride) {
    const int64_t e0 = u * kUnit;
    if (e0 + kUnit <= n) {
      uint4 raw[2];
      raw[0] = reinterpret_cast<const uint4*>(p + e0)[0];
      raw[1] = reinterpret_cast<const uint4*>(p + e0)[1];
      const __nv_bfloat16* x = reinterpret_cast<const __nv_bfloat16*>(raw);
      uint4 packed;
      uint8_t* q = reinterpret_cast<uint8_t*>(&packed);
#pragma unroll
      for (int k = 0; k < kUnit; ++k) q[k] = Quantize(x[k], s);
      reinterpret_cast<uint4*>(mine + e0)[0] = packed;
    } else {
      for (int64_t e = e0; e < n; ++e) mine[e] = Quantize(p[e], s);
    }
  }

  BlockBarrier(pads, rank, world, epoch);

  // Pull every rank's units (own first is as good as any: start after this rank
  // so that ranks spread their reads over different peers).
  for (int k = 0; k < world; ++k) {
    const int src = (rank + 1 + k) % world;
    const float ss =
        reinterpret_cast<const float*>(ws.p[src] + kScalesOffset)[parity * kMaxBlocks + blockIdx.x];
    const uint8_t* theirs = reinterpret_cast<const uint8_t*>(ws.p[src] + copy_offset);
    __nv_bfloat16* row = full + src * n;
    for (int64_t u = first; u < units; u += stride) {
      const int64_t e0 = u * kUnit;
      if (e0 + kUnit <= n) {
        const uint4 packed = reinterpret_cast<const uint4*>(theirs + e0)[0];
        const uint8_t* q = reinterpret_cast<const uint8_t*>(&packed);
        uint4 out[2];
        __nv_bfloat16* y = reinterpret_cast<__nv_bfloat16*>(out);
#pragma unroll
        for (int j = 0; j < kUnit; ++j) y[j] = Dequantize(q[j], ss);
        if (vec_rows) {
          reinterpret_cast<uint4*>(row + e0)[0] = out[0];
          reinterpret_cast<uint4*>(row + e0)[1] = out[1];
        } else {
#pragma unroll
          for (int j = 0; j < kUnit; ++j) row[e0 + j] = y[j];
        }
      } else {
        for (int64_t e = e0; e < n; ++e) row[e] = Dequantize(theirs[e], ss);
      }
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
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
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
  const kf_tensor* p = kf_input(ctx, "p");
  const kf_tensor* hist = kf_input(ctx, "hist");
  kf_tensor* full = kf_output(ctx, "full");
  kf_tensor* hist_out = kf_output(ctx, "hist_out");
  if (st == nullptr || p == nullptr || hist == nullptr || full == nullptr || hist_out == nullptr)
    return 1;
  const int64_t n = p->numel;
  const int64_t copy_stride = (n + 255) / 256 * 256;
  if (ctx->workspace.nbytes < kCopiesOffset + 2 * copy_stride) return 1;
  PeerBytes ws;
  PeerPads pads;
  for (int q = 0; q < KF_MAX_RANKS; ++q) {
    ws.p[q] = q < ctx->world_size ? static_cast<char*>(ctx->workspace.peers[q]) : nullptr;
    pads.p[q] = q < ctx->world_size ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
  }
  unsigned* amax_bits = static_cast<unsigned*>(ctx->workspace.data);
  const auto* pd = static_cast<const __nv_bfloat16*>(p->data);
  const int64_t want = (n + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(want < 1024 ? want : 1024);
  if (cudaMemsetAsync(amax_bits, 0, sizeof(unsigned), ctx->stream) != cudaSuccess) return 1;
  Amax<<<grid, kThreads, 0, ctx->stream>>>(pd, n, amax_bits);
  // Rows of `full` start 16-byte aligned only when a row is a whole number of vectors.
  const bool vec_rows = n % 8 == 0;
  QuantizeAndPull<<<st->blocks, kThreads, 0, ctx->stream>>>(
      pd, n, static_cast<const __nv_bfloat16*>(hist->data),
      static_cast<__nv_bfloat16*>(hist_out->data), static_cast<__nv_bfloat16*>(full->data),
      vec_rows, ws, copy_stride, pads, st->epochs, ctx->rank, ctx->world_size);
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
