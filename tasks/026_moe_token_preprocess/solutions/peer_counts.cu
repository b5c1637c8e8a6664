// MoE token preprocessing with the counts read from the peers: each rank sums
// its mask per expert into its own workspace (one of two halves, alternating
// by call), a one-block kernel signals every peer that its counts are there,
// waits for theirs, and computes the four outputs straight from the peers'
// workspaces. No gathered copy and no collective launch: the whole exchange is
// W-1 flags and E * (W-1) remote loads.
//
// Two halves: a peer may still be reading this rank's counts of call e while
// this rank starts call e + 1; it writes the other half then, and by call
// e + 2 every peer has finished call e (its finish kernel of call e + 1, which
// this rank's call e + 1 waited for, ran after it).
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kPerBlock = 8192;

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
    mine += row[i] != 0.0f ? 1ull : 0ull;
  // Warp sums first: one shared atomic per warp.
  for (int o = 16; o > 0; o /= 2) mine += __shfl_down_sync(0xffffffffu, mine, o);
  if (threadIdx.x % 32 == 0) atomicAdd(&sum, mine);
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(counts + blockIdx.x, sum);
}

struct Peers {
  const long long* counts[KF_MAX_RANKS];  // this call's half of every rank's workspace
  uint32_t* pad[KF_MAX_RANKS];
};

__global__ void Finish(Peers p, uint32_t* epoch, int rank, int world, int experts,
                       long long* in_splits, long long* out_splits, long long* per_local,
                       long long* local_sums) {
  const uint32_t e = *epoch + 1;
  if (threadIdx.x < world && threadIdx.x != rank) {
    kf_signal(p.pad[threadIdx.x] + rank, e);
    kf_wait(p.pad[rank] + threadIdx.x, e);
  }
  __syncthreads();
  const int local = experts / world;
  for (int d = threadIdx.x; d < world; d += blockDim.x) {
    long long in = 0, out = 0;
    for (int l = 0; l < local; ++l) {
      const long long got = p.counts[d][rank * local + l];
      in += p.counts[rank][d * local + l];
      out += got;
      per_local[d * local + l] = got;
    }
    in_splits[d] = in;
    out_splits[d] = out;
  }
  for (int l = threadIdx.x; l < local; l += blockDim.x) {
    long long s = 0;
    for (int q = 0; q < world; ++q) s += p.counts[q][rank * local + l];
    local_sums[l] = s;
  }
  if (threadIdx.x == 0) *epoch = e;
}

struct State {
  uint32_t* epoch = nullptr;
  unsigned calls = 0;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int world = ctx->world_size;
  const int experts = static_cast<int>(ctx->inputs[0].shape[0]);
  if (world < 1 || world > 128 || experts % world != 0 ||
      ctx->workspace.nbytes < 2 * sizeof(long long) * experts)
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
  const kf_tensor& mask = ctx->inputs[0];
  const int world = ctx->world_size;
  const int experts = static_cast<int>(mask.shape[0]);
  const int64_t per_expert = mask.shape[1] * mask.shape[2];
  const size_t half = static_cast<size_t>(st->calls++ % 2) * experts;
  Peers p = {};
  for (int q = 0; q < world; ++q) {
    p.counts[q] = static_cast<const long long*>(ctx->workspace.peers[q]) + half;
    p.pad[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
  }
  auto* mine = static_cast<unsigned long long*>(ctx->workspace.data) + half;
  if (cudaMemsetAsync(mine, 0, sizeof(long long) * experts, ctx->stream) != cudaSuccess) return 1;
  const dim3 grid(experts, static_cast<unsigned>((per_expert + kPerBlock - 1) / kPerBlock));
  CountPerExpert<<<grid, kThreads, 0, ctx->stream>>>(static_cast<const float*>(mask.data),
                                                      per_expert, mine);
  Finish<<<1, 128, 0, ctx->stream>>>(p, st->epoch, ctx->rank, world, experts,
                                     static_cast<long long*>(ctx->outputs[0].data),
                                     static_cast<long long*>(ctx->outputs[1].data),
                                     static_cast<long long*>(ctx->outputs[2].data),
                                     static_cast<long long*>(ctx->outputs[3].data));
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
