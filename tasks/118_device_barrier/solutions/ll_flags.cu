// Device barrier whose flags carry the words (NCCL's LL protocol; vLLM's multi-generation
// barrier flags), as an in-place exchange. Call number e (a per-rank counter in device memory,
// the same on every rank) reads this rank's old slot, writes each old word as one 8-byte line
// (word | e << 32) into line [e % 2][rank][k] of every peer's signal pad, publishes the new word
// into its slot at once (no peer reads the slot: they get the old word from the line), and spins
// on its own lines [e % 2][p][k] until each carries generation e. Data and flag travel in one
// store, so no fence is needed and the exchange costs one one-way trip.
//
// Two generations of lines: a rank's lines of call e + 1 go to the other half, so they never
// overwrite a line of call e that a peer has not read yet; its lines of call e + 2 go to the same
// half as call e, but it can only write them after finishing call e + 1, i.e. after every peer
// has written its line of call e + 1, i.e. after every peer has finished reading call e. A line
// of parity e % 2 therefore holds generation e - 2 or e, and only e is accepted.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

struct PeerPads {
  uint64_t* p[KF_MAX_RANKS];
};

struct State {
  uint32_t* epoch = nullptr;  // calls made so far (device memory)
};

__device__ __forceinline__ void StoreLine(uint64_t* addr, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(addr), "l"(v) : "memory");
}

__device__ __forceinline__ uint64_t LoadLine(const uint64_t* addr) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(addr) : "memory");
  return v;
}

__global__ void __launch_bounds__(kThreads)
    LlBarrier(int32_t* slot, const int32_t* token, int32_t* tokens, PeerPads pads,
              uint32_t* epoch_ptr, int rank, int world, int k_words) {
  const uint32_t e = *epoch_ptr + 1;
  const int64_t half = static_cast<int64_t>(e & 1) * world * k_words;
  const int64_t n = static_cast<int64_t>(world) * k_words;
  // Send: line (q, k) carries this rank's old word k to peer q, line [e % 2][rank][k]; this
  // rank's own row is written directly.
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int q = static_cast<int>(i / k_words), k = static_cast<int>(i % k_words);
    const int32_t old = slot[k];
    if (q == rank) {
      tokens[static_cast<int64_t>(rank) * k_words + k] = old;
    } else {
      StoreLine(pads.p[q] + half + static_cast<int64_t>(rank) * k_words + k,
                (static_cast<uint64_t>(e) << 32) | static_cast<uint32_t>(old));
    }
  }
  // Publish: every thread has read the old slot.
  __syncthreads();
  for (int k = threadIdx.x; k < k_words; k += blockDim.x) slot[k] = token[k];
  // Receive: wait for generation e in each peer's line.
  const uint64_t start = kf_globaltimer_ns();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int p = static_cast<int>(i / k_words);
    if (p == rank) continue;
    const uint64_t* line = pads.p[rank] + half + i;
    uint64_t v = LoadLine(line);
    while (static_cast<uint32_t>(v >> 32) != e) {
      if (kf_globaltimer_ns() - start > 10ull * 1000 * 1000 * 1000) __trap();
      v = LoadLine(line);
    }
    tokens[i] = static_cast<int32_t>(static_cast<uint32_t>(v));
  }
  __syncthreads();
  if (threadIdx.x == 0) *epoch_ptr = e;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size < 1 || ctx->world_size > KF_MAX_RANKS) return 1;
  const kf_tensor* slot = kf_input(ctx, "slot");
  const kf_tensor* token = kf_input(ctx, "token");
  const kf_tensor* tokens = kf_output(ctx, "tokens");
  if (slot == nullptr || token == nullptr || tokens == nullptr || token->dtype != KF_I32 ||
      slot->numel != token->numel)
    return 1;
  if (tokens->numel != token->numel * ctx->world_size) return 1;
  // Two generations of W * K 8-byte lines must fit in the (zeroed) signal pad.
  if (2 * static_cast<size_t>(ctx->world_size) * token->numel * sizeof(uint64_t) >
      ctx->signal_pad.nbytes)
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
  PeerPads pads;
  for (int q = 0; q < KF_MAX_RANKS; ++q)
    pads.p[q] = q < ctx->world_size ? static_cast<uint64_t*>(ctx->signal_pad.peers[q]) : nullptr;
  LlBarrier<<<1, kThreads, 0, ctx->stream>>>(
      static_cast<int32_t*>(slot->data), static_cast<const int32_t*>(token->data), static_cast<int32_t*>(tokens->data), pads,
      st->epoch, ctx->rank, ctx->world_size, static_cast<int>(token->numel));
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
