// MoE combine by pulling, one warp per token: each token's k expert rows are
// read straight from the ranks that hold them (through the peer pointers) and
// summed with their router weights in registers, so no row is regrouped,
// staged, exchanged or scatter-added through atomics. The baseline copies the
// expert rows twice (regroup, all-to-all) and adds them with bf16 atomics.
//
// Where a token's rows are: position j of perm (token perm[j], expert e(j));
// a first pass inverts it into pos[t][s] (s: the slot of e(j) among the
// token's selected experts). Row j of the exchanged rows is row
// (l*W + r)*c + i of rank p = j / S's expert_outputs (l, i: j's local expert
// and row in its chunk). Products are rounded to bf16 as PKB's are, then
// summed in f32 and rounded once.
//
// No end barrier: only peers' inputs are read and only this rank's output is
// written, and no peer can pass its next start barrier before this rank's
// kernels have finished.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

__global__ void CountRouted(const bool* __restrict__ map, int64_t tokens, long long* counts) {
  __shared__ unsigned long long sum;
  if (threadIdx.x == 0) sum = 0;
  __syncthreads();
  unsigned long long mine = 0;
  for (int64_t t = threadIdx.x; t < tokens; t += blockDim.x) mine += map[blockIdx.x * tokens + t];
  atomicAdd(&sum, mine);
  __syncthreads();
  if (threadIdx.x == 0) counts[blockIdx.x] = static_cast<long long>(sum);
}

// pos[t * k + s] = the position j in perm of token t's s-th selected expert.
__global__ void Invert(const int64_t* __restrict__ perm, const int64_t* __restrict__ selected,
                       const long long* __restrict__ counts, int64_t experts, int64_t slots,
                       int64_t rows, int64_t* pos) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < rows;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t e = 0, end = counts[0];
    while (e + 1 < experts && end <= j) end += counts[++e];
    const int64_t t = perm[j];
    for (int64_t s = 0; s < slots; ++s)
      if (selected[t * slots + s] == e) pos[t * slots + s] = j;
  }
}

struct Peers {
  const __nv_bfloat16* x[KF_MAX_RANKS];
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

constexpr int kMaxSlots = 16;

__global__ void __launch_bounds__(256)
    Combine(Peers p, const int64_t* __restrict__ pos, const __nv_bfloat16* __restrict__ weights,
            __nv_bfloat16* out, int rank, int world, int64_t tokens, int64_t slots,
            int64_t local, int64_t chunk, int64_t hidden) {
  const int lane = threadIdx.x % 32;
  const int64_t per_rank = local * chunk;
  for (int64_t t = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x / 32) {
    const __nv_bfloat16* row[kMaxSlots];
    __nv_bfloat16 w[kMaxSlots];
    for (int64_t s = 0; s < slots; ++s) {
      const int64_t j = pos[t * slots + s];
      const int64_t src = j / per_rank, l = (j % per_rank) / chunk, i = j % chunk;
      row[s] = p.x[src] + ((l * world + rank) * chunk + i) * hidden;
      w[s] = weights[t * slots + s];
    }
    __nv_bfloat16* dst = out + t * hidden;
    if (hidden % 8 == 0) {
      for (int64_t d = lane * 8; d < hidden; d += 32 * 8) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t s = 0; s < slots; ++s) {
          const uint4 v = *reinterpret_cast<const uint4*>(row[s] + d);
          const __nv_bfloat16* b = reinterpret_cast<const __nv_bfloat16*>(&v);
          for (int q = 0; q < 8; ++q) acc[q] += __bfloat162float(__hmul(w[s], b[q]));
        }
        uint4 o;
        __nv_bfloat16* ob = reinterpret_cast<__nv_bfloat16*>(&o);
        for (int q = 0; q < 8; ++q) ob[q] = __float2bfloat16(acc[q]);
        *reinterpret_cast<uint4*>(dst + d) = o;
      }
    } else {
      for (int64_t d = lane; d < hidden; d += 32) {
        float acc = 0;
        for (int64_t s = 0; s < slots; ++s) acc += __bfloat162float(__hmul(w[s], row[s][d]));
        dst[d] = __float2bfloat16(acc);
      }
    }
  }
}

struct State {
  uint32_t* epoch = nullptr;
  long long* counts = nullptr;
  int64_t* pos = nullptr;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const kf_tensor& map = ctx->inputs[1];
  const kf_tensor& selected = ctx->inputs[2];
  if (ctx->world_size > 1024 || selected.shape[1] > kMaxSlots) return 1;
  State* st = new State;
  if (cudaMalloc(&st->epoch, sizeof(uint32_t)) != cudaSuccess ||
      cudaMalloc(&st->counts, sizeof(long long) * map.shape[0]) != cudaSuccess ||
      cudaMalloc(&st->pos, sizeof(int64_t) * selected.numel) != cudaSuccess ||
      cudaMemsetAsync(st->epoch, 0, sizeof(uint32_t), ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
    cudaFree(st->epoch);
    cudaFree(st->counts);
    cudaFree(st->pos);
    delete st;
    return 1;
  }
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 1;
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& map = ctx->inputs[1];
  const kf_tensor& selected = ctx->inputs[2];
  const int world = ctx->world_size;
  const int64_t experts = map.shape[0], tokens = map.shape[1], slots = selected.shape[1];
  const int64_t rows = x.shape[0], hidden = x.shape[1];
  Peers p = {};
  for (int q = 0; q < world; ++q) {
    p.x[q] = static_cast<const __nv_bfloat16*>(x.peers[q]);
    p.pad[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
  }
  CountRouted<<<static_cast<int>(experts), 256, 0, ctx->stream>>>(
      static_cast<const bool*>(map.data), tokens, st->counts);
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  Invert<<<sms, 256, 0, ctx->stream>>>(static_cast<const int64_t*>(ctx->inputs[4].data),
                                       static_cast<const int64_t*>(selected.data), st->counts,
                                       experts, slots, rows, st->pos);
  Barrier<<<1, 32 * ((world + 31) / 32), 0, ctx->stream>>>(p, st->epoch, ctx->rank, world);
  Combine<<<4 * sms, 256, 0, ctx->stream>>>(
      p, st->pos, static_cast<const __nv_bfloat16*>(ctx->inputs[3].data),
      static_cast<__nv_bfloat16*>(ctx->outputs[0].data), ctx->rank, world, tokens, slots,
      experts / world, rows / experts, hidden);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (cudaFree(st->epoch) != cudaSuccess || cudaFree(st->counts) != cudaSuccess ||
      cudaFree(st->pos) != cudaSuccess)
    rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
