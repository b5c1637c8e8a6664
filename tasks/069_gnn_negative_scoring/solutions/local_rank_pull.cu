// Rank locally, then all-gather the rankings (8 bytes a row) instead of the scores (K + 1 scores a
// row). Every rank's rankings depend only on its own rows, so rank r ranks its n_r rows where they
// are (one read of its scores from HBM, a warp per row) into its workspace, publishes n_r next to
// them, and, once every peer has done the same, pulls every rank's rankings through the peer
// pointers into its output, in rank order. The baseline moves every rank's K + 1 scores a row to
// every other rank (all of them at K = 1000: ~1000x the bytes), stops the stream to read the row
// counts on the host, and ranks all T rows on every rank.
//
//   kernel 1: rankings of this rank's rows -> workspace half h (h = call parity), n_r beside them
//   kernel 2: every block signals "my half h is written" to every peer and waits for the same from
//             every peer (idempotent, so blocks need not be co-resident), then copies rank p's
//             rankings from p's half h to out[off_p ...], off_p = n_0 + ... + n_{p-1}, for every p.
//
// Ordering. Peers read half h of this rank's workspace only after this rank's kernel 1 of the same
// call finished (kernel 2 signals after it, in stream order; kf_signal releases at system scope).
// The halves alternate, so this rank's next write of half h is two calls later: before it, its
// kernel 2 of the call in between has waited for every peer's signal of that call, which each peer
// sends only after its own kernel 2 of this call (its reads of half h) has finished. The harness
// never touches the workspace, and only this rank writes its output, so no end barrier is needed.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxWorld = 32;

struct Halves {
  const int64_t* half[kMaxWorld];  // rank p's current half: [count | pad to 256 B | rankings]
  uint32_t* pad[kMaxWorld];
};

struct State {
  uint32_t epoch = 0;  // calls made; every rank makes the same calls
};

__device__ __forceinline__ float ToF(float v) { return v; }
__device__ __forceinline__ float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }

// How many of the values packed in a 16-byte vector are >= p.
__device__ __forceinline__ int CountGe(const uint4& v, float p, float) {
  return (__uint_as_float(v.x) >= p) + (__uint_as_float(v.y) >= p) + (__uint_as_float(v.z) >= p) +
         (__uint_as_float(v.w) >= p);
}
__device__ __forceinline__ int CountGe(const uint4& v, float p, __nv_bfloat16) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  int c = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i)  // a bf16 is the top half of the float it converts to
    c += (__uint_as_float(w[i] << 16) >= p) + (__uint_as_float(w[i] & 0xffff0000u) >= p);
  return c;
}

// half[0] = n; half[32 + i] = 1 + #{ j : neg[i][j] >= pos[i] }, a warp per row.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    RankLocal(const T* __restrict__ pos, const T* __restrict__ neg, int64_t n, int64_t k, bool vec,
              int64_t* __restrict__ half) {
  if (blockIdx.x == 0 && threadIdx.x == 0) half[0] = n;
  int64_t* rankings = half + 32;  // 256 bytes past the count
  const int lane = threadIdx.x % 32;
  for (int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; i < n;
       i += static_cast<int64_t>(gridDim.x) * kWarps) {
    const float p = ToF(pos[i]);
    const T* row = neg + i * k;
    int c = 0;
    if (vec) {  // rows are whole, aligned 16-byte vectors
      const uint4* v = reinterpret_cast<const uint4*>(row);
      const int64_t nv = k * static_cast<int64_t>(sizeof(T)) / 16;
#pragma unroll 4
      for (int64_t j = lane; j < nv; j += 32) c += CountGe(__ldg(v + j), p, T());
    } else {
      for (int64_t j = lane; j < k; j += 32) c += ToF(row[j]) >= p;
    }
    c = __reduce_add_sync(0xffffffffu, c);
    if (lane == 0) rankings[i] = 1 + c;
  }
}

__global__ void __launch_bounds__(kThreads)
    Gather(Halves h, uint32_t epoch, int rank, int world, int64_t cap, int64_t* __restrict__ out) {
  __shared__ int64_t count[kMaxWorld], first[kMaxWorld + 1];
  if (static_cast<int>(threadIdx.x) < world) {
    const int q = threadIdx.x;
    if (q != rank) {
      kf_signal(h.pad[q] + rank, epoch);
      kf_wait(h.pad[rank] + q, epoch);
    }
    count[q] = __ldcg(h.half[q]);  // L2, never a stale L1 line
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    first[0] = 0;
    for (int q = 0; q < world; ++q) first[q + 1] = first[q] + count[q];
  }
  __syncthreads();
  const int64_t total = first[world] < cap ? first[world] : cap;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < total;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int q = 0;
    while (g >= first[q + 1]) ++q;
    out[g] = __ldcg(h.half[q] + 32 + (g - first[q]));
  }
}

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

template <typename T>
int LaunchRankLocal(const void* pos, const void* neg, int64_t n, int64_t k, int64_t* half, int sms,
                    cudaStream_t s) {
  int64_t blocks = (n + kWarps - 1) / kWarps;
  if (blocks > 16 * static_cast<int64_t>(sms)) blocks = 16 * static_cast<int64_t>(sms);
  if (blocks < 1) blocks = 1;  // the count is written even when this rank has no rows
  // The inputs are 256-byte aligned, so rows are aligned when they are whole vectors.
  const bool vec = k * static_cast<int64_t>(sizeof(T)) % 16 == 0;
  RankLocal<T><<<static_cast<int>(blocks), kThreads, 0, s>>>(
      static_cast<const T*>(pos), static_cast<const T*>(neg), n, k, vec, half);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size > kMaxWorld) return 1;
  ctx->user = new State;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor* pos = kf_input(ctx, "local_pos_scores");
  const kf_tensor* neg = kf_input(ctx, "local_neg_scores");
  kf_tensor* out = kf_output(ctx, "rankings");
  if (st == nullptr || pos == nullptr || neg == nullptr || out == nullptr) return 1;
  if (pos->dtype != KF_BF16 && pos->dtype != KF_F32) return 2;
  const int world = ctx->world_size, rank = ctx->rank;
  const int64_t n = pos->shape[0], k = neg->shape[1];
  // Two halves of [count | pad | rankings], each sized for the most rows any rank holds: no rank
  // holds more than T = out->numel.
  const size_t half_bytes = Align(256 + 8 * static_cast<size_t>(out->numel));
  if (2 * half_bytes > ctx->workspace.nbytes) return 1;
  st->epoch += 1;
  const size_t offset = (st->epoch % 2) * half_bytes;
  Halves h = {};
  for (int q = 0; q < world; ++q) {
    h.half[q] = reinterpret_cast<const int64_t*>(static_cast<const char*>(ctx->workspace.peers[q]) +
                                                 offset);
    h.pad[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
  }
  auto* mine = reinterpret_cast<int64_t*>(static_cast<char*>(ctx->workspace.data) + offset);
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  const int rc = pos->dtype == KF_BF16
                     ? LaunchRankLocal<__nv_bfloat16>(pos->data, neg->data, n, k, mine, sms,
                                                      ctx->stream)
                     : LaunchRankLocal<float>(pos->data, neg->data, n, k, mine, sms, ctx->stream);
  if (rc != 0) return 1;
  // Few blocks: the copy is T * 8 bytes, and when ranks share a GPU the waiting blocks must leave
  // room for the peers' kernels.
  int64_t blocks = (out->numel + 4 * kThreads - 1) / (4 * kThreads);
  const int64_t max_blocks = ctx->emulated ? 4 : sms;
  if (blocks > max_blocks) blocks = max_blocks;
  if (blocks < 1) blocks = 1;
  Gather<<<static_cast<int>(blocks), kThreads, 0, ctx->stream>>>(
      h, st->epoch, rank, world, out->numel, static_cast<int64_t*>(out->data));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  delete static_cast<State*>(ctx->user);
  ctx->user = nullptr;
  return rc;
}
