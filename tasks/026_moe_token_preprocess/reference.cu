// MoE token preprocessing baseline, as VeOmni's preprocess does it: the
// tokens per expert (a reduction of the mask over slots and tokens), an
// all-gather of the E counts (NCCL's on real GPUs), then the splits and the
// per-local-expert counts from the gathered [W, E] table.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kPerBlock = 8192;  // mask values one block sums

// Block (e, part): values [part * kPerBlock, ...) of expert e's k * T.
__global__ void CountPerExpert(const float* __restrict__ mask, int64_t per_expert,
                               unsigned long long* counts) {
  __shared__ unsigned long long sum;
  if (threadIdx.x == 0) sum = 0;
  __syncthreads();
  const float* row = mask + blockIdx.x * per_expert;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * kPerBlock;
  const int64_t end = begin + kPerBlock < per_expert ? begin + kPerBlock : per_expert;
  unsigned long long mine = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads)
    mine += static_cast<unsigned long long>(row[i]);
  atomicAdd(&sum, mine);
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(counts + blockIdx.x, sum);
}

// table[p * E + e] = n_p[e].
__global__ void Finish(const long long* __restrict__ table, int rank, int world, int experts,
                       long long* in_splits, long long* out_splits, long long* per_local,
                       long long* local_sums) {
  const int local = experts / world;
  for (int d = threadIdx.x; d < world; d += blockDim.x) {
    long long in = 0, out = 0;
    for (int l = 0; l < local; ++l) {
      in += table[rank * experts + d * local + l];
      out += table[d * experts + rank * local + l];
      per_local[d * local + l] = table[d * experts + rank * local + l];
    }
    in_splits[d] = in;
    out_splits[d] = out;
  }
  for (int l = threadIdx.x; l < local; l += blockDim.x) {
    long long s = 0;
    for (int p = 0; p < world; ++p) s += table[p * experts + rank * local + l];
    local_sums[l] = s;
  }
}

}  // namespace

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& mask = ctx->inputs[0];
  const int world = ctx->world_size;
  const int experts = static_cast<int>(mask.shape[0]);
  const int64_t per_expert = mask.shape[1] * mask.shape[2];
  auto* counts = static_cast<unsigned long long*>(ctx->workspace.data);
  auto* table = static_cast<long long*>(ctx->workspace.data) + experts;
  if (ctx->workspace.nbytes < sizeof(long long) * experts * (world + 1) || experts % world != 0)
    return 1;
  if (cudaMemsetAsync(counts, 0, sizeof(long long) * experts, ctx->stream) != cudaSuccess) return 1;
  const dim3 grid(experts, static_cast<unsigned>((per_expert + kPerBlock - 1) / kPerBlock));
  CountPerExpert<<<grid, kThreads, 0, ctx->stream>>>(static_cast<const float*>(mask.data),
                                                     per_expert, counts);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_gather(ctx, counts, table, experts, KF_I64) != 0) return 1;
  Finish<<<1, 128, 0, ctx->stream>>>(
      table, ctx->rank, world, experts, static_cast<long long*>(ctx->outputs[0].data),
      static_cast<long long*>(ctx->outputs[1].data), static_cast<long long*>(ctx->outputs[2].data),
      static_cast<long long*>(ctx->outputs[3].data));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
