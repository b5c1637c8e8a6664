// TP QK RMSNorm in one kernel (the technique of SGLang's parallel_qknorm_across_head): block b
// takes tokens b, b + G, ... (G blocks, the same grid on every rank). For each of them it
// block-reduces its columns' sums of squares of q and k and pushes them to every rank (itself
// included) as two 8-byte lines (fp32 bits | call number << 32) into slot [e % 2][t][rank] of that
// rank's workspace; only then does it spin, token by token, until the W lines of each token in its
// own workspace carry call number e, add them in rank order (so every rank gets bit-identical
// sums) and normalise its columns. Pushing all of a block's tokens before waiting for any pays the
// flag trip once per block rather than once per token (SGLang's kernel waits per token and hides
// the wait behind prefetching the next token instead). Data and flag travel in one store (NCCL's
// LL lines), so no fence is needed.
//
// Two generations of slots: block b of a rank writes call e + 2's lines into the half of call e
// only after it has seen call e + 1's lines from every rank, which every rank writes only after
// its whole call-e kernel has finished (stream order), so no line of call e is overwritten
// before it is read. A slot of parity e % 2 holds generation e - 2 or e; only e is accepted.
// The workspace is not zeroed by the harness: kf_setup zeroes this rank's slots and handshakes
// with every peer through the (zeroed) signal pad before any rank can push.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

struct State {
  uint32_t* epochs = nullptr;  // calls made so far, per block (device memory)
  int blocks = 0;
};

struct Args {
  const __nv_bfloat16* q;
  const __nv_bfloat16* k;
  const __nv_bfloat16* wq;
  const __nv_bfloat16* wk;
  __nv_bfloat16* q_out;
  __nv_bfloat16* k_out;
  uint64_t* slots[KF_MAX_RANKS];  // every rank's workspace: [2][T][W][2] lines
  int64_t tokens, lq, lk;
  float qd, kd, eps;
  int rank, world;
};

__device__ __forceinline__ void StoreLine(uint64_t* slot, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(slot), "l"(v) : "memory");
}

__device__ __forceinline__ uint64_t LoadLine(const uint64_t* slot) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(slot) : "memory");
  return v;
}

__global__ void __launch_bounds__(kThreads) FusedQkNorm(Args a, uint32_t* epochs) {
  __shared__ float part[2][kWarps];
  __shared__ float got[2][KF_MAX_RANKS];
  __shared__ float scale[2];
  __shared__ uint32_t last_epoch;
  if (threadIdx.x == 0) last_epoch = epochs[blockIdx.x];
  __syncthreads();
  const uint32_t e = last_epoch + 1;
  const int64_t half = static_cast<int64_t>(e & 1) * a.tokens * a.world * 2;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  // 1. Every token of this block: local sums of squares (fp32), pushed to every rank at once, so
  // that the block pays one flag trip for all its tokens, not one per token.
  for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    float sq = 0, sk = 0;
    for (int64_t j = threadIdx.x; j < a.lq; j += blockDim.x) {
      const float x = __bfloat162float(a.q[t * a.lq + j]);
      sq += x * x;
    }
    for (int64_t j = threadIdx.x; j < a.lk; j += blockDim.x) {
      const float x = __bfloat162float(a.k[t * a.lk + j]);
      sk += x * x;
    }
    for (int o = 16; o > 0; o /= 2) {
      sq += __shfl_xor_sync(0xffffffffu, sq, o);
      sk += __shfl_xor_sync(0xffffffffu, sk, o);
    }
    if (lane == 0) part[0][warp] = sq, part[1][warp] = sk;
    __syncthreads();
    if (warp == 0) {
      float bq = lane < kWarps ? part[0][lane] : 0.f;
      float bk = lane < kWarps ? part[1][lane] : 0.f;
      for (int o = 16; o > 0; o /= 2) {
        bq += __shfl_xor_sync(0xffffffffu, bq, o);
        bk += __shfl_xor_sync(0xffffffffu, bk, o);
      }
      if (lane < a.world) {
        const uint64_t flag = static_cast<uint64_t>(e) << 32;
        uint64_t* dst = a.slots[lane] + half + (t * a.world + a.rank) * 2;
        StoreLine(dst, flag | __float_as_uint(bq));
        StoreLine(dst + 1, flag | __float_as_uint(bk));
      }
    }
    __syncthreads();  // part is reused by the next token
  }

  // 2. Every token of this block: collect every rank's sums (added in rank order, so every rank
  // gets bit-identical scales), then the norm with one rounding to bf16.
  const uint64_t start = kf_globaltimer_ns();
  for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    if (warp == 0) {
      if (lane < a.world) {
        const uint64_t* src = a.slots[a.rank] + half + (t * a.world + lane) * 2;
        uint64_t vq = LoadLine(src), vk = LoadLine(src + 1);
        while (static_cast<uint32_t>(vq >> 32) != e || static_cast<uint32_t>(vk >> 32) != e) {
          if (kf_globaltimer_ns() - start > 10ull * 1000 * 1000 * 1000) __trap();
          vq = LoadLine(src);
          vk = LoadLine(src + 1);
        }
        got[0][lane] = __uint_as_float(static_cast<uint32_t>(vq));
        got[1][lane] = __uint_as_float(static_cast<uint32_t>(vk));
      }
      __syncwarp();
      if (lane == 0) {
        float gq = 0, gk = 0;
        for (int p = 0; p < a.world; ++p) gq += got[0][p], gk += got[1][p];
        scale[0] = rsqrtf(gq / a.qd + a.eps);
        scale[1] = rsqrtf(gk / a.kd + a.eps);
      }
    }
    __syncthreads();
    const float s_q = scale[0], s_k = scale[1];
    for (int64_t j = threadIdx.x; j < a.lq; j += blockDim.x)
      a.q_out[t * a.lq + j] = __float2bfloat16_rn(__bfloat162float(a.q[t * a.lq + j]) * s_q *
                                                  __bfloat162float(a.wq[j]));
    for (int64_t j = threadIdx.x; j < a.lk; j += blockDim.x)
      a.k_out[t * a.lk + j] = __float2bfloat16_rn(__bfloat162float(a.k[t * a.lk + j]) * s_k *
                                                  __bfloat162float(a.wk[j]));
    __syncthreads();  // got and scale are reused by the next token
  }
  if (threadIdx.x == 0) epochs[blockIdx.x] = e;
}

// Setup handshake: tell every peer that this rank's slots are zeroed, wait for theirs.
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
  if (world < 1 || world > 32 || world > KF_MAX_RANKS) return 1;
  const char* ins[] = {"q", "k", "q_weight", "k_weight"};
  for (const char* name : ins)
    if (kf_input(ctx, name) == nullptr || kf_input(ctx, name)->dtype != KF_BF16) return 1;
  if (kf_output(ctx, "q_out") == nullptr || kf_output(ctx, "k_out") == nullptr) return 1;
  const int64_t tokens = kf_input(ctx, "q")->shape[0];
  const size_t slot_bytes = 2 * static_cast<size_t>(tokens) * world * 2 * sizeof(uint64_t);
  if (ctx->workspace.nbytes < slot_bytes) return 1;
  // Co-residency: block b spins on block b of every rank, so when ranks share one GPU every
  // rank's grid must fit beside the others'.
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int64_t blocks = ctx->emulated ? sms / (2 * world) : 2 * sms;
  if (blocks > tokens) blocks = tokens;
  if (blocks < 1) blocks = 1;

  State* st = new State;
  st->blocks = static_cast<int>(blocks);
  bool ok = cudaMalloc(&st->epochs, sizeof(uint32_t) * blocks) == cudaSuccess &&
            cudaMemsetAsync(st->epochs, 0, sizeof(uint32_t) * blocks, ctx->stream) == cudaSuccess &&
            cudaMemsetAsync(ctx->workspace.data, 0, slot_bytes, ctx->stream) == cudaSuccess;
  if (ok) {
    SetupHandshake<<<1, 32, 0, ctx->stream>>>(ctx->signal_pad, ctx->rank, world);
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
  const kf_tensor* q = kf_input(ctx, "q");
  const kf_tensor* k = kf_input(ctx, "k");
  Args a;
  a.q = static_cast<const __nv_bfloat16*>(q->data);
  a.k = static_cast<const __nv_bfloat16*>(k->data);
  a.wq = static_cast<const __nv_bfloat16*>(kf_input(ctx, "q_weight")->data);
  a.wk = static_cast<const __nv_bfloat16*>(kf_input(ctx, "k_weight")->data);
  a.q_out = static_cast<__nv_bfloat16*>(kf_output(ctx, "q_out")->data);
  a.k_out = static_cast<__nv_bfloat16*>(kf_output(ctx, "k_out")->data);
  for (int p = 0; p < KF_MAX_RANKS; ++p)
    a.slots[p] = p < ctx->world_size ? static_cast<uint64_t*>(ctx->workspace.peers[p]) : nullptr;
  a.tokens = q->shape[0];
  a.lq = q->shape[1];
  a.lk = k->shape[1];
  a.qd = static_cast<float>(kf_param(ctx, "Qd", 1));
  a.kd = static_cast<float>(kf_param(ctx, "Kd", 1));
  a.eps = static_cast<float>(kf_param(ctx, "eps", 1e-6));
  a.rank = ctx->rank;
  a.world = ctx->world_size;
  FusedQkNorm<<<st->blocks, kThreads, 0, ctx->stream>>>(a, st->epochs);
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
