// Signal-wait handshake by peer reads and a done-signal: the consumer reads its producer's
// payload straight from the producer's buffer and adds x, then block b tells the producer "block
// b has read your words"; the producer's block b waits for that signal from its own consumer
// before it refills the same words. The signal goes backwards (consumer to producer), and the data
// costs a remote round trip, against the LL handoff's one one-way trip.
//
// Flags: slot [b] of the producer's signal pad holds the last call in which its consumer's block
// b finished reading (a per-block counter in device memory, the same on every rank); the grid
// depends only on n, so block b covers the same words on every rank.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

struct State {
  uint32_t* epochs = nullptr;  // calls made so far, per block (device memory)
  int max_blocks = 0;
};

struct Args {
  int32_t* payload;  // this rank's; refilled in place
  const int32_t* next_payload;
  const int32_t* payload_prev;  // the producer's buffer
  const int32_t* x;
  int32_t* y;
  uint32_t* done_own;   // this rank's pad: its consumer's done flags
  uint32_t* done_prev;  // the producer's pad
  int64_t n;
};

__global__ void __launch_bounds__(kThreads) PullAckKernel(Args a, uint32_t* epochs) {
  __shared__ uint32_t last_epoch;
  if (threadIdx.x == 0) last_epoch = epochs[blockIdx.x];
  __syncthreads();
  const uint32_t e = last_epoch + 1;
  const int64_t per = (a.n + gridDim.x - 1) / gridDim.x;
  const int64_t lo = blockIdx.x * per, hi = lo + per < a.n ? lo + per : a.n;

  // Consume, then tell the producer (the leading __syncthreads puts every thread's reads before
  // the release in kf_signal).
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
    a.y[i] = static_cast<int32_t>(static_cast<uint32_t>(a.payload_prev[i]) +
                                  static_cast<uint32_t>(a.x[i]));
  __syncthreads();
  if (threadIdx.x == 0) {
    kf_signal(a.done_prev + blockIdx.x, e);
    kf_wait(a.done_own + blockIdx.x, e);  // the consumer has read these words of this call
  }
  __syncthreads();
  // Refill.
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) a.payload[i] = a.next_payload[i];
  if (threadIdx.x == 0) epochs[blockIdx.x] = e;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int world = ctx->world_size;
  if (world < 1 || world > KF_MAX_RANKS) return 1;
  if (kf_input(ctx, "payload") == nullptr || kf_input(ctx, "next_payload") == nullptr ||
      kf_input(ctx, "x") == nullptr || kf_output(ctx, "y") == nullptr)
    return 1;
  // Co-residency: block b waits for block b of its consumer, so when ranks share one GPU every
  // rank's grid must fit beside the others'. The pad holds one flag per block.
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int max_blocks = ctx->emulated ? sms / (2 * world) : sms;
  if (max_blocks < 1) max_blocks = 1;
  const size_t pad_slots = ctx->signal_pad.nbytes / sizeof(uint32_t);
  if (pad_slots < static_cast<size_t>(max_blocks)) max_blocks = static_cast<int>(pad_slots);
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
  if (st == nullptr) return 1;
  const int world = ctx->world_size;
  const int prev = (ctx->rank - 1 + world) % world;
  kf_tensor* payload = kf_input(ctx, "payload");
  Args a;
  a.payload = static_cast<int32_t*>(payload->data);
  a.next_payload = static_cast<const int32_t*>(kf_input(ctx, "next_payload")->data);
  a.payload_prev = static_cast<const int32_t*>(payload->peers[prev]);
  a.x = static_cast<const int32_t*>(kf_input(ctx, "x")->data);
  a.y = static_cast<int32_t*>(kf_output(ctx, "y")->data);
  a.done_own = static_cast<uint32_t*>(ctx->signal_pad.data);
  a.done_prev = static_cast<uint32_t*>(ctx->signal_pad.peers[prev]);
  a.n = payload->numel;
  int64_t blocks = (a.n + kThreads - 1) / kThreads;
  if (blocks > st->max_blocks) blocks = st->max_blocks;
  if (blocks < 1) blocks = 1;
  PullAckKernel<<<static_cast<int>(blocks), kThreads, 0, ctx->stream>>>(a, st->epochs);
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
