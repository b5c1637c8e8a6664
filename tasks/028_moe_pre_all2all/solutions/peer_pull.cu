// MoE dispatch by pulling: each rank computes its routing map and its
// expert-major permutation (into its output and into one half of its
// workspace, alternating by call), meets the peers at a one-block barrier,
// and then fills its output rows straight from the peers' tokens: output row
// (l*W + p)*c + i is token perm_p[r*S + l*c + i] of rank p, read through the
// peer pointers. No permuted copy, no staging, no all-to-all launch: every
// dispatched row is read once and written once.
//
// The peers read the permutation from this rank's workspace, never from its
// output (which the harness poisons before every call). Two halves: a peer may
// still be reading call e's permutation while this rank computes call e + 1's
// into the other half; by call e + 2 every peer is past call e (its barrier of
// call e + 1, which this rank waited for, ran after its pull of call e).
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

// As the baseline: block e computes routing_map[e][*] (first pass, perm
// null: counts[e] too) or, with the counts known, expert e's entries of perm.
__global__ void __launch_bounds__(kThreads)
    Route(const float* __restrict__ mask, int64_t slots, int64_t tokens, float* routing_map,
          long long* counts, int64_t* perm, int64_t* perm_copy) {
  __shared__ int warp_sum[kWarps];
  __shared__ long long running;
  const int e = blockIdx.x;
  long long base = 0;
  if (perm != nullptr) {
    for (int q = 0; q < e; ++q) base += counts[q];
  }
  if (threadIdx.x == 0) running = 0;
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t t0 = 0; t0 < tokens; t0 += kThreads) {
    const int64_t t = t0 + threadIdx.x;
    float m = 0;
    if (t < tokens) {
      for (int64_t s = 0; s < slots; ++s) m += mask[(e * slots + s) * tokens + t];
      if (perm == nullptr) routing_map[e * tokens + t] = m;
    }
    const bool routed = t < tokens && m != 0.0f;
    const unsigned b = __ballot_sync(0xffffffffu, routed);
    if (lane == 0) warp_sum[warp] = __popc(b);
    __syncthreads();
    if (routed && perm != nullptr) {
      long long before = running + __popc(b & ((1u << lane) - 1));
      for (int w = 0; w < warp; ++w) before += warp_sum[w];
      perm[base + before] = t;
      perm_copy[base + before] = t;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 0; w < kWarps; ++w) running += warp_sum[w];
    }
    __syncthreads();
  }
  if (perm == nullptr && threadIdx.x == 0) counts[e] = running;
}

struct Peers {
  const char* h[KF_MAX_RANKS];
  const int64_t* perm[KF_MAX_RANKS];  // this call's half of every rank's workspace
  uint32_t* pad[KF_MAX_RANKS];
};

__global__ void Barrier(Peers p, uint32_t* epoch, int rank, int world) {
  const uint32_t e = *epoch + 1;
  if (threadIdx.x < world && threadIdx.x != rank) {
    kf_signal(p.pad[threadIdx.x] + rank, e);
    kf_wait(p.pad[rank] + threadIdx.x, e);
  }
  __syncthreads();
  if (threadIdx.x == 0) *epoch = e;
}

// A warp per output row.
__global__ void __launch_bounds__(256)
    Pull(Peers p, char* out, int rank, int world, int64_t local, int64_t chunk, int64_t row_bytes) {
  const int lane = threadIdx.x % 32;
  const int64_t per_rank = local * chunk, rows = world * per_rank;
  for (int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
       row < rows; row += static_cast<int64_t>(gridDim.x) * blockDim.x / 32) {
    const int64_t i = row % chunk, lp = row / chunk;
    const int src = static_cast<int>(lp % world);
    const int64_t l = lp / world;
    const int64_t token = p.perm[src][rank * per_rank + l * chunk + i];
    const char* s = p.h[src] + token * row_bytes;
    char* d = out + row * row_bytes;
    if (row_bytes % 16 == 0) {
      for (int64_t j = lane; j < row_bytes / 16; j += 32)
        reinterpret_cast<uint4*>(d)[j] = reinterpret_cast<const uint4*>(s)[j];
    } else {
      for (int64_t j = lane; j < row_bytes / 2; j += 32)
        reinterpret_cast<uint16_t*>(d)[j] = reinterpret_cast<const uint16_t*>(s)[j];
    }
  }
}

struct State {
  uint32_t* epoch = nullptr;
  long long* counts = nullptr;
  unsigned calls = 0;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const kf_tensor& mask = ctx->inputs[1];
  const int64_t rows = mask.shape[1] * mask.shape[2];
  if (ctx->world_size > 1024 || ctx->workspace.nbytes < 2 * sizeof(int64_t) * rows) return 1;
  State* st = new State;
  if (cudaMalloc(&st->epoch, sizeof(uint32_t)) != cudaSuccess ||
      cudaMalloc(&st->counts, sizeof(long long) * mask.shape[0]) != cudaSuccess ||
      cudaMemsetAsync(st->epoch, 0, sizeof(uint32_t), ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
    cudaFree(st->epoch);
    cudaFree(st->counts);
    delete st;
    return 1;
  }
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 1;
  const kf_tensor& h = ctx->inputs[0];
  const kf_tensor& mask = ctx->inputs[1];
  const int world = ctx->world_size;
  const int64_t experts = mask.shape[0], slots = mask.shape[1], tokens = mask.shape[2];
  const int64_t rows = tokens * slots;
  const size_t half = static_cast<size_t>(st->calls++ % 2) * static_cast<size_t>(rows);
  Peers p = {};
  for (int q = 0; q < world; ++q) {
    p.h[q] = static_cast<const char*>(h.peers[q]);
    p.perm[q] = static_cast<const int64_t*>(ctx->workspace.peers[q]) + half;
    p.pad[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
  }
  const auto* m = static_cast<const float*>(mask.data);
  auto* map = static_cast<float*>(ctx->outputs[1].data);
  auto* perm = static_cast<int64_t*>(ctx->outputs[2].data);
  auto* perm_copy = static_cast<int64_t*>(ctx->workspace.data) + half;
  Route<<<static_cast<int>(experts), kThreads, 0, ctx->stream>>>(m, slots, tokens, map,
                                                                   st->counts, nullptr, nullptr);
  Route<<<static_cast<int>(experts), kThreads, 0, ctx->stream>>>(m, slots, tokens, map,
                                                                   st->counts, perm, perm_copy);
  Barrier<<<1, 32 * ((world + 31) / 32), 0, ctx->stream>>>(p, st->epoch, ctx->rank, world);
  const int64_t row_bytes = h.shape[1] * static_cast<int64_t>(kf_dtype_size(h.dtype));
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  Pull<<<4 * sms, 256, 0, ctx->stream>>>(p, static_cast<char*>(ctx->outputs[0].data), ctx->rank,
                                         world, experts / world, rows / experts, row_bytes);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (cudaFree(st->epoch) != cudaSuccess || cudaFree(st->counts) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
