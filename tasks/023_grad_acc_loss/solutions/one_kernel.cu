// Grad-acc loss in ONE single-warp kernel: the all-reduce of one float is done
// with peer stores. Lane p stores this rank's loss * tokens into slot
// [parity][rank] of rank p's workspace and raises flag [rank] in rank p's pad
// with the call's epoch (release); lane p then waits for flag [p] of this
// rank's pad (acquire). Lane 0 adds the W values in rank order (every rank gets
// the same sum) and writes the outputs. Slots are double-buffered by call
// parity: a peer is at most one call ahead (to start call e+2 it needs this
// rank's flag of call e+1, raised only after this rank finished call e). The
// epoch lives in device memory; the pad is zeroed only before kf_setup.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

struct Peers {
  float* ws[KF_MAX_RANKS];
  uint32_t* pad[KF_MAX_RANKS];
};

__device__ __forceinline__ float ToF(float v) { return v; }
__device__ __forceinline__ float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void Put(float* p, float v) { *p = v; }
__device__ __forceinline__ void Put(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename T>
__global__ void __launch_bounds__(32)
    GradAccLoss(const T* loss, const int64_t* local, const int64_t* global, const T* grad_norm,
                const T* grad_sum, T* normalized, T* sum_out, T* grad_loss, Peers peers,
                uint32_t* epoch_mem, int rank, int world) {
  const uint32_t epoch = *epoch_mem + 1;
  const int64_t n = *local;
  const float mine = n == 0 ? 0.f : ToF(*loss) * static_cast<float>(n);
  const int lane = threadIdx.x;
  const size_t base = static_cast<size_t>(epoch & 1u) * KF_MAX_RANKS;
  float got = 0.f;
  if (lane < world) {
    peers.ws[lane][base + rank] = mine;
    kf_signal(peers.pad[lane] + rank, epoch);
    kf_wait(peers.pad[rank] + lane, epoch);
    got = reinterpret_cast<volatile float*>(peers.ws[rank])[base + lane];
  }
  // Rank order, one lane: the same float sum on every rank.
  float vals[KF_MAX_RANKS];
#pragma unroll
  for (int p = 0; p < KF_MAX_RANKS; ++p) vals[p] = __shfl_sync(0xffffffffu, got, p);
  if (lane == 0) {
    float s = 0.f;
    for (int p = 0; p < world; ++p) s += vals[p];
    const float nf = static_cast<float>(n);
    const float g = static_cast<float>(*global);
    Put(sum_out, s);
    Put(normalized, s / g);
    Put(grad_loss, ToF(*grad_norm) * nf / g + ToF(*grad_sum) * nf);
    *epoch_mem = epoch;
  }
}

template <typename T>
int Run(kf_ctx* ctx, uint32_t* epoch) {
  Peers peers{};
  for (int r = 0; r < ctx->world_size; ++r) {
    peers.ws[r] = static_cast<float*>(ctx->workspace.peers[r]);
    peers.pad[r] = static_cast<uint32_t*>(ctx->signal_pad.peers[r]);
  }
  GradAccLoss<T><<<1, 32, 0, ctx->stream>>>(
      static_cast<const T*>(kf_input(ctx, "loss")->data),
      static_cast<const int64_t*>(kf_input(ctx, "local_valid_tokens")->data),
      static_cast<const int64_t*>(kf_input(ctx, "global_valid_tokens")->data),
      static_cast<const T*>(kf_input(ctx, "grad_normalized_loss")->data),
      static_cast<const T*>(kf_input(ctx, "grad_loss_sum")->data),
      static_cast<T*>(kf_output(ctx, "normalized_loss")->data),
      static_cast<T*>(kf_output(ctx, "loss_sum")->data),
      static_cast<T*>(kf_output(ctx, "grad_loss")->data), peers, epoch, ctx->rank, ctx->world_size);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const char* ins[] = {"loss", "local_valid_tokens", "global_valid_tokens", "grad_normalized_loss",
                       "grad_loss_sum"};
  const char* outs[] = {"normalized_loss", "loss_sum", "grad_loss"};
  for (const char* n : ins)
    if (kf_input(ctx, n) == nullptr) return 1;
  for (const char* n : outs)
    if (kf_output(ctx, n) == nullptr) return 1;
  if (ctx->world_size > 32 || ctx->workspace.nbytes < 2 * KF_MAX_RANKS * sizeof(float)) return 1;
  uint32_t* epoch = nullptr;
  if (cudaMalloc(&epoch, sizeof(uint32_t)) != cudaSuccess) return 1;
  if (cudaMemsetAsync(epoch, 0, sizeof(uint32_t), ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
    cudaFree(epoch);
    return 1;
  }
  ctx->user = epoch;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  uint32_t* epoch = static_cast<uint32_t*>(ctx->user);
  if (epoch == nullptr) return 1;
  switch (kf_input(ctx, "loss")->dtype) {
    case KF_BF16:
      return Run<__nv_bfloat16>(ctx, epoch);
    case KF_F32:
      return Run<float>(ctx, epoch);
    default:
      return 2;
  }
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  uint32_t* epoch = static_cast<uint32_t*>(ctx->user);
  if (epoch == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (cudaFree(epoch) != cudaSuccess) rc = 1;
  ctx->user = nullptr;
  return rc;
}
