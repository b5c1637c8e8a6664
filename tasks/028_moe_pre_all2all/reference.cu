// MoE dispatch baseline, as VeOmni's token_pre_all2all does it: routing map
// and expert-major permutation (masked_select of token ids), gather of the
// permuted tokens, an equal-split all-to-all (NCCL's on real GPUs), then the
// regrouping of the received chunks by local expert (sort_chunks_by_idxs).
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

// Block e: routing_map[e][t] and, with `base` (experts before e) known, the
// position of every routed token of expert e in perm. First pass (perm null):
// counts[e] only.
__global__ void __launch_bounds__(kThreads)
    Route(const float* __restrict__ mask, int64_t slots, int64_t tokens, float* routing_map,
          long long* counts, int64_t* perm) {
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
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 0; w < kWarps; ++w) running += warp_sum[w];
    }
    __syncthreads();
  }
  if (perm == nullptr && threadIdx.x == 0) counts[e] = running;
}

// out[j] = h[perm[j]], a row of `hidden` 2-byte values.
__global__ void Gather(const uint16_t* __restrict__ h, const int64_t* __restrict__ perm,
                       uint16_t* out, int64_t rows, int64_t hidden) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < rows * hidden;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = k / hidden;
    out[k] = h[perm[j] * hidden + (k - j * hidden)];
  }
}

// out[(l*W + p)*c + i] = recv[p*S + l*c + i].
__global__ void Regroup(const uint16_t* __restrict__ recv, uint16_t* out, int world, int64_t local,
                        int64_t chunk, int64_t hidden) {
  const int64_t per_rank = local * chunk, n = world * per_rank * hidden;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = k / hidden, col = k - row * hidden;
    const int64_t i = row % chunk, lp = row / chunk;
    const int64_t p = lp % world, l = lp / world;
    out[k] = recv[(p * per_rank + l * chunk + i) * hidden + col];
  }
}

int Grid(int64_t n) { return static_cast<int>(n / 256 + 1 < 8192 ? n / 256 + 1 : 8192); }

}  // namespace

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& h = ctx->inputs[0];
  const kf_tensor& mask = ctx->inputs[1];
  kf_tensor& out = ctx->outputs[0];
  const int world = ctx->world_size;
  const int64_t tokens = h.shape[0], hidden = h.shape[1];
  const int64_t experts = mask.shape[0], slots = mask.shape[1];
  const int64_t rows = tokens * slots, chunk = rows / experts, local = experts / world;
  const size_t bytes = static_cast<size_t>(rows * hidden) * 2;
  char* ws = static_cast<char*>(ctx->workspace.data);
  if (ctx->workspace.nbytes < 2 * bytes + 8 * experts || h.dtype != KF_BF16) return 1;
  auto* permuted = reinterpret_cast<uint16_t*>(ws);
  auto* received = reinterpret_cast<uint16_t*>(ws + bytes);
  auto* counts = reinterpret_cast<long long*>(ws + 2 * bytes);
  auto* perm = static_cast<int64_t*>(ctx->outputs[2].data);
  const auto* m = static_cast<const float*>(mask.data);
  auto* map = static_cast<float*>(ctx->outputs[1].data);
  Route<<<static_cast<int>(experts), kThreads, 0, ctx->stream>>>(m, slots, tokens, map, counts,
                                                                 nullptr);
  Route<<<static_cast<int>(experts), kThreads, 0, ctx->stream>>>(m, slots, tokens, map, counts,
                                                                 perm);
  Gather<<<Grid(rows * hidden), 256, 0, ctx->stream>>>(static_cast<const uint16_t*>(h.data), perm,
                                                       permuted, rows, hidden);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_to_all(ctx, permuted, received, static_cast<size_t>(rows / world * hidden), KF_BF16) !=
      0)
    return 1;
  Regroup<<<Grid(rows * hidden), 256, 0, ctx->stream>>>(received, static_cast<uint16_t*>(out.data),
                                                        world, local, chunk, hidden);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
