// Device barrier as an in-place exchange by peer reads and a flag barrier: every rank reads the
// old words of every peer's slot (remote loads, all in flight at once), then meets every peer at
// a barrier (thread p raises this rank's flag in peer p's signal pad and waits for peer p's), and
// only then publishes its new word into its own slot, when no peer can still be reading it. Two
// trips (the reads, then the barrier) against the LL exchange's one.
//
// The barrier's flags are per-call counters (kept in device memory, the same on every rank):
// slot [src] of the receiver's pad holds the last call src has reached, and a wait for >= e passes
// for a peer that is already one call ahead, which it can only be after passing this barrier.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

struct PeerSlots {
  const int32_t* p[KF_MAX_RANKS];
};

struct State {
  uint32_t* epoch = nullptr;  // calls made so far (device memory)
};

__global__ void __launch_bounds__(kThreads)
    PullBarrier(PeerSlots old, int32_t* slot, const int32_t* token, int32_t* tokens,
                kf_buffer pad, uint32_t* epoch_ptr, int rank, int world, int k_words) {
  const uint32_t e = *epoch_ptr + 1;
  const int64_t n = static_cast<int64_t>(world) * k_words;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    tokens[i] = old.p[i / k_words][i % k_words];
  // The leading __syncthreads puts every thread's reads before the release in kf_signal.
  __syncthreads();
  const int peer = threadIdx.x;
  if (peer < world && peer != rank) {
    kf_signal(static_cast<uint32_t*>(pad.peers[peer]) + rank, e);
    kf_wait(static_cast<uint32_t*>(pad.data) + peer, e);
  }
  __syncthreads();
  for (int k = threadIdx.x; k < k_words; k += blockDim.x) slot[k] = token[k];
  if (threadIdx.x == 0) *epoch_ptr = e;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size < 1 || ctx->world_size > KF_MAX_RANKS) return 1;
  const kf_tensor* slot = kf_input(ctx, "slot");
  const kf_tensor* token = kf_input(ctx, "token");
  const kf_tensor* tokens = kf_output(ctx, "tokens");
  if (slot == nullptr || token == nullptr || tokens == nullptr || token->dtype != KF_I32 ||
      slot->numel != token->numel || tokens->numel != token->numel * ctx->world_size)
    return 1;
  State* st = new State;
  if (cudaMalloc(&st->epoch, sizeof(uint32_t)) != cudaSuccess ||
      cudaMemsetAsync(st->epoch, 0, sizeof(uint32_t), ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
    cudaFree(st->epoch);
    delete st;
    return 1;
  }
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 1;
  kf_tensor* slot = kf_input(ctx, "slot");
  const kf_tensor* token = kf_input(ctx, "token");
  kf_tensor* tokens = kf_output(ctx, "tokens");
  PeerSlots old;
  for (int q = 0; q < KF_MAX_RANKS; ++q)
    old.p[q] = q < ctx->world_size ? static_cast<const int32_t*>(slot->peers[q]) : nullptr;
  PullBarrier<<<1, kThreads, 0, ctx->stream>>>(
      old, static_cast<int32_t*>(slot->data), static_cast<const int32_t*>(token->data),
      static_cast<int32_t*>(tokens->data), ctx->signal_pad, st->epoch, ctx->rank,
      ctx->world_size, static_cast<int>(token->numel));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (cudaFree(st->epoch) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
