// Load-balancing loss in ONE kernel, with the cross-rank mean fused in.
//
// Rows: a segment of seg = min(32, next power of two >= E) lanes handles one
// token row, lane e holding expert e (for E > 32 a full warp, each lane holding
// experts lane, lane + 32, ...). Max, sum and the top-k argmaxes are segment
// shuffles, and every lane keeps its experts' probability sums and selection
// counts in registers: no shared-memory atomics per row. For E = 8 a warp
// handles 4 consecutive rows per step, i.e. one contiguous, coalesced span.
//
// Finish: blocks add their per-expert sums into a global [2E] array, and the
// last block to arrive (an atomic ticket after a fence) forms this rank's loss,
// resets the array and the ticket for the next call, and does the cross-rank
// mean: lane p stores the loss into slot [parity][rank] of rank p's workspace
// and raises flag [rank] in rank p's pad (release), then waits for flag [p] of
// its own pad (acquire); the W values are added in rank order. The epoch is in
// device memory (the pad is zeroed only before setup); slots are double-buffered
// by call parity, since a peer can be at most one call ahead. Only the last
// block waits, so no co-residency is needed.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxExperts = 256;
constexpr int kMaxSlots = kMaxExperts / 32;
constexpr int kMaxTopK = 16;
// Workspace layout (bytes).
constexpr size_t kTicketOff = 0;
constexpr size_t kSlotsOff = 256;  // [2][KF_MAX_RANKS] floats, written by peers
constexpr size_t kAccOff = 1024;   // [2E] floats: counts, then probability sums
constexpr size_t kEpochOff = 128;  // this rank's call counter

struct Peers {
  float* slots[KF_MAX_RANKS];
  uint32_t* pad[KF_MAX_RANKS];
};

__device__ __forceinline__ float ToF(float v) { return v; }
__device__ __forceinline__ float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__global__ void __launch_bounds__(kThreads)
    LoadBalance(const T* logits, int64_t rows, int experts, int seg, int k, char* ws, Peers peers,
                float* out, int rank, int world) {
  __shared__ float s_acc[2 * kMaxExperts];
  for (int i = threadIdx.x; i < 2 * experts; i += blockDim.x) s_acc[i] = 0.f;
  __syncthreads();

  const int lane = threadIdx.x & 31;
  const int sub = lane / seg;     // which row of the warp's step
  const int sl = lane % seg;      // lane within the segment
  const int per_step = 32 / seg;  // rows per warp step
  const int slots = (experts + seg - 1) / seg;
  const unsigned mask = 0xffffffffu;
  float prob[kMaxSlots], cnt[kMaxSlots];
  for (int j = 0; j < kMaxSlots; ++j) prob[j] = cnt[j] = 0.f;

  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t base = warp * per_step; base < rows; base += warps * per_step) {
    const int64_t t = base + sub;
    const bool row_ok = t < rows;
    float v[kMaxSlots];
    float mx = -INFINITY;
    for (int j = 0; j < slots; ++j) {
      const int e = j * seg + sl;
      v[j] = row_ok && e < experts ? ToF(logits[t * experts + e]) : -INFINITY;
      mx = fmaxf(mx, v[j]);
    }
    for (int o = seg / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(mask, mx, o, seg));
    float z = 0.f, p[kMaxSlots];
    for (int j = 0; j < slots; ++j) {
      p[j] = v[j] == -INFINITY ? 0.f : __expf(v[j] - mx);
      z += p[j];
    }
    for (int o = seg / 2; o > 0; o >>= 1) z += __shfl_xor_sync(mask, z, o, seg);
    if (row_ok) {
      const float inv = 1.f / z;
      for (int j = 0; j < slots; ++j) prob[j] += p[j] * inv;
    }
    // Top-k: k rounds of a segment argmax over (logit, lower expert first).
    for (int r = 0; r < k; ++r) {
      float bv = -INFINITY;
      int be = 0x7fffffff;
      for (int j = 0; j < slots; ++j) {
        const int e = j * seg + sl;
        if (e < experts && (v[j] > bv || (v[j] == bv && e < be))) bv = v[j], be = e;
      }
      for (int o = seg / 2; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(mask, bv, o, seg);
        const int oe = __shfl_xor_sync(mask, be, o, seg);
        if (ov > bv || (ov == bv && oe < be)) bv = ov, be = oe;
      }
      if (be % seg == sl) {
        // The winner's lane: count it (for a real row) and take it out of the
        // next rounds. Register arrays are indexed by a compare loop, not by j.
        for (int q = 0; q < slots; ++q) {
          if (q == be / seg) {
            if (row_ok) cnt[q] += 1.f;
            v[q] = -INFINITY;
          }
        }
      }
    }
  }
  for (int j = 0; j < slots; ++j) {
    const int e = j * seg + sl;
    if (e < experts) {
      atomicAdd(&s_acc[e], cnt[j]);
      atomicAdd(&s_acc[experts + e], prob[j]);
    }
  }
  __syncthreads();
  float* acc = reinterpret_cast<float*>(ws + kAccOff);
  for (int i = threadIdx.x; i < 2 * experts; i += blockDim.x) atomicAdd(&acc[i], s_acc[i]);

  // The last block to finish forms the rank's loss and does the exchange.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* ticket = reinterpret_cast<unsigned*>(ws + kTicketOff);
    last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  __shared__ float part[kThreads / 32];
  __shared__ float loss_s;
  volatile float* vacc = acc;
  const float n = static_cast<float>(rows);
  float s = 0.f;
  for (int e = threadIdx.x; e < experts; e += blockDim.x)
    s += (vacc[e] / n) * (vacc[experts + e] / n);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(mask, s, o);
  if (lane == 0) part[threadIdx.x / 32] = s;
  __syncthreads();
  for (int i = threadIdx.x; i < 2 * experts; i += blockDim.x) acc[i] = 0.f;  // next call
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int w = 0; w < kThreads / 32; ++w) t += part[w];
    loss_s = t * static_cast<float>(experts);
    *reinterpret_cast<unsigned*>(ws + kTicketOff) = 0u;
  }
  __syncthreads();
  if (threadIdx.x >= 32) return;
  uint32_t* epoch_mem = reinterpret_cast<uint32_t*>(ws + kEpochOff);
  const uint32_t epoch = *epoch_mem + 1;
  const size_t base = static_cast<size_t>(epoch & 1u) * KF_MAX_RANKS;
  float got = 0.f;
  if (lane < world) {
    peers.slots[lane][base + rank] = loss_s;
    kf_signal(peers.pad[lane] + rank, epoch);
    kf_wait(peers.pad[rank] + lane, epoch);
    got = reinterpret_cast<volatile float*>(peers.slots[rank])[base + lane];
  }
  float vals[KF_MAX_RANKS];
#pragma unroll
  for (int p = 0; p < KF_MAX_RANKS; ++p) vals[p] = __shfl_sync(mask, got, p);
  if (lane == 0) {
    float total = 0.f;
    for (int p = 0; p < world; ++p) total += vals[p];
    *out = total / static_cast<float>(world);
    *epoch_mem = epoch;
  }
}

int NextPow2(int x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  kf_tensor* x = kf_input(ctx, "gate_logits");
  const int k = static_cast<int>(kf_param(ctx, "top_k", 2));
  if (x == nullptr || kf_output(ctx, "loss") == nullptr || x->ndim != 2) return 1;
  if (x->shape[1] < 1 || x->shape[1] > kMaxExperts || k < 1 || k > kMaxTopK || k > x->shape[1])
    return 1;
  if (ctx->world_size > 32 || ctx->workspace.nbytes < kAccOff + 2 * kMaxExperts * sizeof(float))
    return 1;
  // Ticket, epoch and accumulators start at zero; the peers' slots need no init.
  if (cudaMemsetAsync(ctx->workspace.data, 0, kSlotsOff, ctx->stream) != cudaSuccess ||
      cudaMemsetAsync(static_cast<char*>(ctx->workspace.data) + kAccOff, 0,
                      2 * kMaxExperts * sizeof(float), ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess)
    return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = *kf_input(ctx, "gate_logits");
  const int k = static_cast<int>(kf_param(ctx, "top_k", 2));
  const int64_t rows = x.shape[0];
  const int experts = static_cast<int>(x.shape[1]);
  const int seg = experts >= 32 ? 32 : NextPow2(experts);
  Peers peers{};
  for (int r = 0; r < ctx->world_size; ++r) {
    peers.slots[r] =
        reinterpret_cast<float*>(static_cast<char*>(ctx->workspace.peers[r]) + kSlotsOff);
    peers.pad[r] = static_cast<uint32_t*>(ctx->signal_pad.peers[r]);
  }
  const int64_t rows_per_block = static_cast<int64_t>(kThreads / 32) * (32 / seg);
  int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  const int64_t cap = 4LL * (ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1);
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  char* ws = static_cast<char*>(ctx->workspace.data);
  float* out = static_cast<float*>(kf_output(ctx, "loss")->data);
  switch (x.dtype) {
    case KF_BF16:
      LoadBalance<__nv_bfloat16><<<static_cast<int>(blocks), kThreads, 0, ctx->stream>>>(
          static_cast<const __nv_bfloat16*>(x.data), rows, experts, seg, k, ws, peers, out,
          ctx->rank, ctx->world_size);
      break;
    case KF_F32:
      LoadBalance<float><<<static_cast<int>(blocks), kThreads, 0, ctx->stream>>>(
          static_cast<const float*>(x.data), rows, experts, seg, k, ws, peers, out, ctx->rank,
          ctx->world_size);
      break;
    default:
      return 2;
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
