// MoE combine baseline, as VeOmni's tokens_post_all2all does it: regroup the
// expert rows by destination rank (sort_chunks_by_idxs back), an equal-split
// all-to-all (NCCL's on real GPUs), the router weights in expert-major order
// (weights placed by expert, masked_select by the routing map: segment e of perm is as
// long as the tokens routed to e), then a bf16
// scatter_add_ of the weighted rows into the zeroed token rows.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

// out[(q*L + l)*c + i] = x[(l*W + q)*c + i].
__global__ void Unsort(const uint16_t* __restrict__ x, uint16_t* out, int world, int64_t local,
                       int64_t chunk, int64_t hidden) {
  const int64_t n = world * local * chunk * hidden;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = k / hidden, col = k - row * hidden;
    const int64_t i = row % chunk, ql = row / chunk;
    const int64_t l = ql % local, q = ql / local;
    out[k] = x[((l * world + q) * chunk + i) * hidden + col];
  }
}

// Block e: counts[e] = tokens routed to expert e (the length of its segment of perm).
__global__ void CountRouted(const bool* __restrict__ map, int64_t tokens, long long* counts) {
  __shared__ long long sum;
  if (threadIdx.x == 0) sum = 0;
  __syncthreads();
  long long mine = 0;
  for (int64_t t = threadIdx.x; t < tokens; t += blockDim.x)
    mine += map[blockIdx.x * tokens + t] ? 1 : 0;
  atomicAdd(reinterpret_cast<unsigned long long*>(&sum), static_cast<unsigned long long>(mine));
  __syncthreads();
  if (threadIdx.x == 0) counts[blockIdx.x] = sum;
}

// weight[j] for row j of the received rows, then out[perm[j]] += bf16(w * U[j]).
__global__ void WeightedScatterAdd(const __nv_bfloat16* __restrict__ u,
                                   const int64_t* __restrict__ perm,
                                   const int64_t* __restrict__ selected,
                                   const __nv_bfloat16* __restrict__ weights,
                                   const long long* __restrict__ counts, int64_t experts,
                                   int64_t slots, int64_t rows, int64_t hidden,
                                   __nv_bfloat16* out) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < rows * hidden;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = k / hidden, col = k - j * hidden;
    int64_t e = 0, end = counts[0];
    while (e + 1 < experts && end <= j) end += counts[++e];
    const int64_t t = perm[j];
    __nv_bfloat16 w = __float2bfloat16(0.0f);
    for (int64_t s = 0; s < slots; ++s)
      if (selected[t * slots + s] == e) w = weights[t * slots + s];
    atomicAdd(out + t * hidden + col, __hmul(w, u[k]));
  }
}

int Grid(int64_t n) { return static_cast<int>(n / 256 + 1 < 8192 ? n / 256 + 1 : 8192); }

}  // namespace

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& map = ctx->inputs[1];
  const kf_tensor& selected = ctx->inputs[2];
  const kf_tensor& weights = ctx->inputs[3];
  const kf_tensor& perm = ctx->inputs[4];
  kf_tensor& out = ctx->outputs[0];
  const int world = ctx->world_size;
  const int64_t experts = map.shape[0], tokens = map.shape[1], slots = selected.shape[1];
  const int64_t rows = x.shape[0], hidden = x.shape[1];
  const int64_t chunk = rows / experts, local = experts / world;
  char* ws = static_cast<char*>(ctx->workspace.data);
  if (ctx->workspace.nbytes < 2 * x.nbytes + 8 * (experts + 1) || x.dtype != KF_BF16) return 1;
  auto* regrouped = reinterpret_cast<uint16_t*>(ws);
  auto* received = reinterpret_cast<__nv_bfloat16*>(ws + x.nbytes);
  auto* counts = reinterpret_cast<long long*>(ws + 2 * x.nbytes);
  Unsort<<<Grid(rows * hidden), 256, 0, ctx->stream>>>(static_cast<const uint16_t*>(x.data),
                                                       regrouped, world, local, chunk, hidden);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_to_all(ctx, regrouped, received, static_cast<size_t>(rows / world * hidden),
                    KF_BF16) != 0)
    return 1;
  CountRouted<<<static_cast<int>(experts), 256, 0, ctx->stream>>>(
      static_cast<const bool*>(map.data), tokens, counts);
  if (cudaMemsetAsync(out.data, 0, out.nbytes, ctx->stream) != cudaSuccess) return 1;
  WeightedScatterAdd<<<Grid(rows * hidden), 256, 0, ctx->stream>>>(
      received, static_cast<const int64_t*>(perm.data), static_cast<const int64_t*>(selected.data),
      static_cast<const __nv_bfloat16*>(weights.data), counts, experts, slots, rows, hidden,
      static_cast<__nv_bfloat16*>(out.data));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
