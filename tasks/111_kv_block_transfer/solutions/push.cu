// KV block transfer with one kernel of direct peer writes (the batched block writes of
// NixlConnector / the Mooncake transfer engine, done with SM stores over NVLink).
//
// Both ranks of a pair launch the same grid. CTA b of the decode rank tells CTA b of its
// prefill rank "my cache is ready" (the harness restores it before each call), then waits
// for "done". CTA b of the prefill rank waits for ready, writes its share of the request's
// blocks straight from its cache into the decode rank's blocks, and signals done. No
// staging buffer, no copy engine, one flag each way per CTA.
#include <cuda_runtime.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;

struct State {
  uint32_t* epoch;  // epoch[b]: calls CTA b has made
  int ctas;
};

// Slots of the signal pad: the prefill rank's [b] is "decode CTA b ready", the decode
// rank's [ctas + b] is "prefill CTA b done".
struct Args {
  const uint8_t* src;     // prefill: its own cache
  uint8_t* dst;           // prefill: the decode rank's cache (a peer pointer)
  const int32_t* src_ids; // prefill: its own ids
  const int32_t* dst_ids; // prefill: the decode rank's ids (a peer pointer)
  uint32_t* my_pad;
  uint32_t* peer_pad;
  int64_t nr, block_bytes, parts;
  int is_prefill;
};

__device__ __forceinline__ int4 LoadStreaming(const int4* p) {
  int4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Moves units [begin, end) of one block (16-byte units when `vec`, else bytes).
__device__ void CopyPart(const uint8_t* from, uint8_t* to, int64_t begin, int64_t end, bool vec) {
  if (vec) {
    const int4* f = reinterpret_cast<const int4*>(from);
    int4* t = reinterpret_cast<int4*>(to);
    int64_t j = begin + threadIdx.x;
    for (; j + (kUnroll - 1) * kThreads < end; j += kUnroll * kThreads) {
      int4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = LoadStreaming(f + j + u * kThreads);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) t[j + u * kThreads] = v[u];
    }
    for (; j < end; j += kThreads) t[j] = LoadStreaming(f + j);
  } else {
    for (int64_t j = begin + threadIdx.x; j < end; j += kThreads) to[j] = from[j];
  }
}

__global__ void __launch_bounds__(kThreads) Transfer(Args a, uint32_t* epochs) {
  __shared__ int32_t sid[kThreads], did[kThreads];
  __shared__ int64_t part_of[kThreads];
  const int b = blockIdx.x, g = gridDim.x;
  const uint32_t e = epochs[b] + 1;
  if (!a.is_prefill) {
    if (threadIdx.x == 0) {
      kf_signal(a.peer_pad + b, e);          // ready: my cache is restored, write into it
      kf_wait(a.my_pad + g + b, e);          // done: the prefill CTA's writes are visible
      epochs[b] = e;
    }
    return;
  }
  if (threadIdx.x == 0) kf_wait(a.my_pad + b, e);
  __syncthreads();
  const bool vec = a.block_bytes % 16 == 0;
  const int64_t units = vec ? a.block_bytes / 16 : a.block_bytes;
  const int64_t items = a.nr * a.parts;  // item k: part k % parts of request block k / parts
  for (int64_t q = 0; b + q * g < items; q += kThreads) {
    // Fetch this batch's ids at once: the decode rank's are remote, one latency per batch.
    const int64_t k = b + (q + threadIdx.x) * g;
    if (k < items) {
      const int64_t blk = k / a.parts;
      sid[threadIdx.x] = a.src_ids[blk];
      did[threadIdx.x] = a.dst_ids[blk];
      part_of[threadIdx.x] = k % a.parts;
    }
    __syncthreads();
    for (int t = 0; t < kThreads && b + (q + t) * g < items; ++t) {
      const int64_t p = part_of[t];
      const int64_t begin = units * p / a.parts, end = units * (p + 1) / a.parts;
      CopyPart(a.src + sid[t] * a.block_bytes, a.dst + did[t] * a.block_bytes, begin, end, vec);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    __threadfence_system();
    kf_signal(a.peer_pad + g + b, e);
    epochs[b] = e;
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  State* st = new State;
  // The same grid on both ranks of a pair (it pairs CTAs); few CTAs when ranks share a
  // GPU, so that every rank's CTAs are resident at once.
  st->ctas = ctx->emulated ? 4 : ctx->gpu.sm_count;
  if (2 * st->ctas * sizeof(uint32_t) > ctx->signal_pad.nbytes) return 1;
  if (cudaMalloc(&st->epoch, st->ctas * sizeof(uint32_t)) != cudaSuccess) return 1;
  if (cudaMemset(st->epoch, 0, st->ctas * sizeof(uint32_t)) != cudaSuccess) return 1;
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const int g = kf_group_index(ctx, "pd");
  if (g < 0) return 2;
  const kf_group& pd = ctx->groups[g];
  const int peer = pd.ranks[1 - pd.rank];
  const kf_tensor& cache = *kf_input(ctx, "kv_cache");
  const kf_tensor& ids = *kf_input(ctx, "block_ids");
  Args a;
  a.is_prefill = pd.rank == 0;
  a.src = static_cast<const uint8_t*>(cache.data);
  a.dst = static_cast<uint8_t*>(cache.peers[peer]);
  a.src_ids = static_cast<const int32_t*>(ids.data);
  a.dst_ids = static_cast<const int32_t*>(ids.peers[peer]);
  a.my_pad = static_cast<uint32_t*>(ctx->signal_pad.data);
  a.peer_pad = static_cast<uint32_t*>(ctx->signal_pad.peers[peer]);
  a.nr = ids.numel;
  a.block_bytes = static_cast<int64_t>(cache.nbytes) / cache.shape[0];
  // Split blocks into parts when the request has fewer blocks than CTAs, down to about one
  // unit per thread, so that a 1k-token request still spreads over the whole GPU.
  const int64_t units = a.block_bytes % 16 == 0 ? a.block_bytes / 16 : a.block_bytes;
  const int64_t max_parts = (units + kThreads - 1) / kThreads;
  int64_t parts = a.nr > 0 ? (st->ctas + a.nr - 1) / a.nr : 1;
  a.parts = parts < 1 ? 1 : (parts > max_parts ? max_parts : parts);
  Transfer<<<st->ctas, kThreads, 0, ctx->stream>>>(a, st->epoch);
  return cudaGetLastError() != cudaSuccess;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  cudaFree(st->epoch);
  delete st;
  return 0;
}
