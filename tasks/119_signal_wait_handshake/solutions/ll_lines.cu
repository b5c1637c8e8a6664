// Signal-wait handshake with the LL protocol: the producer writes its payload into the
// consumer's workspace as 8-byte lines, each (4 payload bytes | per-call flag << 32), in one
// store, and the consumer spins on each line's flag, so data and signal arrive together and no
// fence or separate flag is needed (NCCL's prims_ll.h; TensorRT-LLM's low-latency flags). The
// consumer reads the lines, never the producer's buffer, so each thread refills its words of the
// payload as soon as it has sent them.
//
// Rank r produces for next = r + 1 and consumes from prev = r - 1 (mod W). Call number e (a
// counter per block in device memory, the same on every rank) uses line buffer e % 2 of the consumer's
// workspace. In a ring a producer may run ahead of its consumer, so before overwriting buffer
// e % 2 (last used by call e - 2), block b of the producer waits for the credit that block b of
// the consumer raises in the producer's signal pad after reading call e - 2's lines. The lines
// a block writes and the lines the same block of the consumer reads are the same range, since
// every rank runs the same grid over the same n.
//
// The workspace is not zeroed by the harness: kf_setup zeroes this rank's line buffers, then
// handshakes with every peer through the (zeroed) signal pad, so that no producer writes a line
// before its consumer has cleared the buffer. A zeroed line has flag 0 and calls start at 1.
//
// Signal pad (uint32 slots): [0, W) the setup handshake, [W, W + max_blocks) the credits.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

struct State {
  uint32_t* epochs = nullptr;  // calls made so far, per block (device memory)
  int max_blocks = 0;
};

__device__ __forceinline__ void StoreLine(uint64_t* slot, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(slot), "l"(v) : "memory");
}

__device__ __forceinline__ uint64_t LoadLine(const uint64_t* slot) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(slot) : "memory");
  return v;
}

struct Args {
  int32_t* payload;  // this rank's, for next; refilled in place
  const int32_t* next_payload;
  const int32_t* x;
  int32_t* y;
  uint64_t* lines_next;   // next's workspace: 2 buffers of n lines
  const uint64_t* lines;  // this rank's workspace
  uint32_t* credit_own;   // this rank's pad + W: credits from next
  uint32_t* credit_prev;  // prev's pad + W: credits this rank raises for prev
  int64_t n;
};

// The range of lines block b owns: the same on every rank.
__device__ __forceinline__ void BlockRange(int64_t n, int64_t* lo, int64_t* hi) {
  const int64_t per = (n + gridDim.x - 1) / gridDim.x;
  *lo = blockIdx.x * per;
  *hi = *lo + per < n ? *lo + per : n;
}

__global__ void __launch_bounds__(kThreads) LlKernel(Args a, uint32_t* epochs) {
  __shared__ uint32_t last_epoch;
  if (threadIdx.x == 0) last_epoch = epochs[blockIdx.x];
  __syncthreads();
  const uint32_t e = last_epoch + 1;
  const int64_t half = static_cast<int64_t>(e & 1) * a.n;
  int64_t lo, hi;
  BlockRange(a.n, &lo, &hi);

  // Produce: wait for the consumer's credit for call e - 2 (which used the same buffer).
  if (e > 2) {
    if (threadIdx.x == 0) kf_wait(a.credit_own + blockIdx.x, e - 2);
    __syncthreads();
  }
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const uint64_t line = (static_cast<uint64_t>(e) << 32) | static_cast<uint32_t>(a.payload[i]);
    StoreLine(a.lines_next + half + i, line);
    a.payload[i] = a.next_payload[i];
  }

  // Consume: every line of call e from prev, then add x.
  const uint64_t start = kf_globaltimer_ns();
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const uint64_t* slot = a.lines + half + i;
    uint64_t v = LoadLine(slot);
    while (static_cast<uint32_t>(v >> 32) != e) {
      if (kf_globaltimer_ns() - start > 10ull * 1000 * 1000 * 1000) __trap();
      v = LoadLine(slot);
    }
    a.y[i] = static_cast<int32_t>(static_cast<uint32_t>(v) + static_cast<uint32_t>(a.x[i]));
  }

  // Credit: this block has read its lines of call e; prev may reuse the buffer at call e + 2.
  __syncthreads();
  if (threadIdx.x == 0) {
    kf_signal(a.credit_prev + blockIdx.x, e);
    epochs[blockIdx.x] = e;
  }
}

// Setup handshake: tell every peer that this rank's line buffers are zeroed, wait for theirs.
__global__ void SetupHandshake(kf_buffer pad, int rank, int world) {
  const int peer = threadIdx.x;
  if (peer < world && peer != rank) {
    kf_signal(static_cast<uint32_t*>(pad.peers[peer]) + rank, 1);
    kf_wait(static_cast<uint32_t*>(pad.data) + peer, 1);
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int world = ctx->world_size;
  if (world < 1 || world > KF_MAX_RANKS) return 1;
  const kf_tensor* payload = kf_input(ctx, "payload");
  if (payload == nullptr || kf_input(ctx, "next_payload") == nullptr ||
      kf_input(ctx, "x") == nullptr || kf_output(ctx, "y") == nullptr || payload->dtype != KF_I32)
    return 1;
  const size_t line_bytes = 2 * static_cast<size_t>(payload->numel) * sizeof(uint64_t);
  if (ctx->workspace.nbytes < line_bytes) return 1;
  // Co-residency: blocks spin on their producer's lines, so when ranks share one GPU every
  // rank's grid must fit beside the others'. The pad holds the handshake and one credit per block.
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int max_blocks = ctx->emulated ? sms / (2 * world) : sms;
  if (max_blocks < 1) max_blocks = 1;
  const size_t pad_slots = ctx->signal_pad.nbytes / sizeof(uint32_t);
  if (pad_slots < static_cast<size_t>(world + max_blocks)) return 1;

  State* st = new State;
  st->max_blocks = max_blocks;
  bool ok = cudaMalloc(&st->epochs, sizeof(uint32_t) * max_blocks) == cudaSuccess &&
            cudaMemsetAsync(st->epochs, 0, sizeof(uint32_t) * max_blocks, ctx->stream) == cudaSuccess &&
            cudaMemsetAsync(ctx->workspace.data, 0, line_bytes, ctx->stream) == cudaSuccess;
  if (ok) {
    SetupHandshake<<<1, 32 * ((world + 31) / 32), 0, ctx->stream>>>(ctx->signal_pad, ctx->rank,
                                                                   world);
    ok = cudaGetLastError() == cudaSuccess && cudaStreamSynchronize(ctx->stream) == cudaSuccess;
  }
  if (!ok) {
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
  const int next = (ctx->rank + 1) % world, prev = (ctx->rank - 1 + world) % world;
  const kf_tensor* payload = kf_input(ctx, "payload");
  Args a;
  a.payload = static_cast<int32_t*>(payload->data);
  a.next_payload = static_cast<const int32_t*>(kf_input(ctx, "next_payload")->data);
  a.x = static_cast<const int32_t*>(kf_input(ctx, "x")->data);
  a.y = static_cast<int32_t*>(kf_output(ctx, "y")->data);
  a.lines_next = static_cast<uint64_t*>(ctx->workspace.peers[next]);
  a.lines = static_cast<const uint64_t*>(ctx->workspace.data);
  a.credit_own = static_cast<uint32_t*>(ctx->signal_pad.data) + world;
  a.credit_prev = static_cast<uint32_t*>(ctx->signal_pad.peers[prev]) + world;
  a.n = payload->numel;
  // The grid depends only on n, the same on every rank, so producer block b and consumer block b
  // cover the same lines.
  int64_t blocks = (a.n + kThreads - 1) / kThreads;
  if (blocks > st->max_blocks) blocks = st->max_blocks;
  if (blocks < 1) blocks = 1;
  LlKernel<<<static_cast<int>(blocks), kThreads, 0, ctx->stream>>>(a, st->epochs);
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
