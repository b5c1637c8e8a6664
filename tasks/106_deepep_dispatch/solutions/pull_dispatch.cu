// DeepEP-style intranode dispatch with the layout computed on the device and the rows pulled
// over NVLink. No host round trip and no counts exchange: after one start barrier (every peer
// is in this call, so its inputs are in place) every rank reads its sources' routing directly
// and lays out its own output, which is what DeepEP's notify_dispatch computes
// (rank_prefix_matrix, channel_prefix_matrix), then copies its rows.
//   Start: zero the per-expert counts, per-rank barrier through the signal pad (epochs).
//   Count: block (c, p) = 32 tokens of source p: which have an expert here (a ballot), and the
//          per-local-expert counts (atomics).
//   Scan:  exclusive scan of the chunk counts in (source, chunk) order: the first output row
//          of every chunk; num_recv and the per-expert counts.
//   Copy:  block (c, p, z) re-derives its chunk's hit list and copies part z of each row from
//          rank p's x, 16 bytes at a time with several loads in flight; part 0 also writes the
//          remapped top-k indices, weights and source indices.
// Only peers' inputs are read and only this rank's outputs and workspace written, so no end
// barrier is needed: a peer cannot overwrite its inputs before every rank's call has returned.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kChunk = 32;  // tokens per chunk: one warp's ballot
constexpr int kCopyWarps = 8;

struct Peers {
  const void* p[KF_MAX_RANKS];
};

struct Dims {
  int64_t t, h, k, l;
  int world, rank, chunks, parts;
};

struct Work {
  int32_t* counts;      // [W * chunks]
  int32_t* offsets;     // [W * chunks]
  int32_t* per_expert;  // [L]
  uint32_t* epoch;      // [1]
};

__device__ __forceinline__ bool Local(int64_t e, int64_t lo, int64_t l) {
  return e >= lo && e < lo + l;
}

__global__ void Start(Work w, Dims d, Peers pads) {
  for (int64_t i = threadIdx.x; i < d.l; i += blockDim.x) w.per_expert[i] = 0;
  __syncthreads();
  const uint32_t epoch = *w.epoch + 1;
  const int q = threadIdx.x;
  if (q < d.world && q != d.rank) {
    kf_signal(static_cast<uint32_t*>(const_cast<void*>(pads.p[q])) + d.rank, epoch);
    kf_wait(static_cast<const uint32_t*>(pads.p[d.rank]) + q, epoch);
  }
  __syncthreads();
  if (threadIdx.x == 0) *w.epoch = epoch;
}

__global__ void Count(Peers idx, Work w, Dims d) {
  const int p = blockIdx.y, c = blockIdx.x, lane = threadIdx.x;
  const int64_t t = static_cast<int64_t>(c) * kChunk + lane;
  const int64_t lo = d.rank * d.l;
  const int64_t* src = static_cast<const int64_t*>(idx.p[p]);
  bool hit = false;
  if (t < d.t) {
    for (int64_t s = 0; s < d.k; ++s) {
      const int64_t e = src[t * d.k + s];
      if (Local(e, lo, d.l)) {
        hit = true;
        atomicAdd(&w.per_expert[e - lo], 1);
      }
    }
  }
  const unsigned ballot = __ballot_sync(0xffffffffu, hit);
  if (lane == 0) w.counts[p * d.chunks + c] = __popc(ballot);
}

// One block: exclusive scan of W * chunks counts, 1024 at a time with a carry.
__global__ void __launch_bounds__(1024)
    Scan(Work w, Dims d, int64_t* num_recv, int64_t* per_expert) {
  __shared__ int32_t warp_sums[32];
  __shared__ int32_t carry;
  const int n = d.world * d.chunks;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int base = 0; base < n; base += 1024) {
    const int i = base + threadIdx.x;
    const int32_t v = i < n ? w.counts[i] : 0;
    int32_t incl = v;
    for (int o = 1; o < 32; o *= 2) {
      const int32_t u = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += u;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    int32_t before = carry;
    for (int j = 0; j < warp; ++j) before += warp_sums[j];
    if (i < n) w.offsets[i] = before + incl - v;
    __syncthreads();
    if (threadIdx.x == 0) {
      int32_t total = 0;
      for (int j = 0; j < 32; ++j) total += warp_sums[j];
      carry += total;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *num_recv = carry;
  for (int64_t l = threadIdx.x; l < d.l; l += blockDim.x) per_expert[l] = w.per_expert[l];
}

// Copies units [first, last) of a row, units of U, four loads in flight per lane.
template <typename U>
__device__ __forceinline__ void CopyUnits(U* dst, const U* src, int64_t first, int64_t last,
                                          int lane) {
  constexpr int kUnroll = 4;
  for (int64_t i = first + lane; i < last; i += 32 * kUnroll) {
    U v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i + u * 32 < last) v[u] = src[i + u * 32];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i + u * 32 < last) dst[i + u * 32] = v[u];
  }
}

// Part `part` of `parts` of a row of `bytes` bytes (bf16 rows: always even).
__device__ __forceinline__ void CopyRowPart(char* dst, const char* src, int64_t bytes, int part,
                                            int parts, int lane) {
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes) & 15) == 0) {
    const int64_t units = bytes / 16, per = (units + parts - 1) / parts;
    const int64_t first = part * per, last = first + per < units ? first + per : units;
    CopyUnits(reinterpret_cast<uint4*>(dst), reinterpret_cast<const uint4*>(src), first, last,
              lane);
  } else {
    const int64_t units = bytes / 2, per = (units + parts - 1) / parts;
    const int64_t first = part * per, last = first + per < units ? first + per : units;
    CopyUnits(reinterpret_cast<uint16_t*>(dst), reinterpret_cast<const uint16_t*>(src), first, last,
              lane);
  }
}

struct Outs {
  __nv_bfloat16* x;
  int32_t* src;
  int64_t* idx;
  float* w;
};

__global__ void __launch_bounds__(kCopyWarps * 32)
    Copy(Peers x, Peers idx, Peers wt, Work w, Dims d, Outs out) {
  __shared__ int32_t tokens[kChunk];
  __shared__ int32_t count;
  const int p = blockIdx.y, c = blockIdx.x, part = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t lo = d.rank * d.l;
  const int64_t* src_idx = static_cast<const int64_t*>(idx.p[p]);
  if (warp == 0) {
    const int64_t t = static_cast<int64_t>(c) * kChunk + lane;
    bool hit = false;
    if (t < d.t)
      for (int64_t s = 0; s < d.k; ++s) hit = hit || Local(src_idx[t * d.k + s], lo, d.l);
    const unsigned ballot = __ballot_sync(0xffffffffu, hit);
    if (hit) tokens[__popc(ballot & ((1u << lane) - 1u))] = static_cast<int32_t>(t);
    if (lane == 0) count = __popc(ballot);
  }
  __syncthreads();
  const int64_t first_row = w.offsets[p * d.chunks + c];
  const char* xs = static_cast<const char*>(x.p[p]);
  const float* ws = static_cast<const float*>(wt.p[p]);
  const int64_t row_bytes = d.h * 2;
  for (int i = warp; i < count; i += kCopyWarps) {
    const int64_t t = tokens[i], j = first_row + i;
    CopyRowPart(reinterpret_cast<char*>(out.x) + j * row_bytes, xs + t * row_bytes, row_bytes, part,
                d.parts, lane);
    if (part != 0) continue;
    for (int64_t s = lane; s < d.k; s += 32) {
      const int64_t e = src_idx[t * d.k + s];
      const bool local = Local(e, lo, d.l);
      out.idx[j * d.k + s] = local ? e - lo : -1;
      out.w[j * d.k + s] = local ? ws[t * d.k + s] : 0.f;
    }
    if (lane == 0) out.src[j] = static_cast<int32_t>(t);
  }
}

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

struct State {
  Dims dims;
  Work work;
};

Peers PeersOf(const kf_tensor& t, int world) {
  Peers p = {};
  for (int q = 0; q < world; ++q) p.p[q] = t.peers[q];
  return p;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int w = ctx->world_size;
  if (w < 1 || w > KF_MAX_RANKS) return 1;
  const kf_tensor* x = kf_input(ctx, "x");
  const kf_tensor* idx = kf_input(ctx, "topk_idx");
  const kf_tensor* pe = kf_output(ctx, "num_recv_tokens_per_expert");
  if (x == nullptr || idx == nullptr || pe == nullptr || x->ndim != 2 || idx->ndim != 2) return 1;
  if (ctx->signal_pad.nbytes < sizeof(uint32_t) * w) return 1;
  State* st = new State;
  Dims& d = st->dims;
  d.t = x->shape[0];
  d.h = x->shape[1];
  d.k = idx->shape[1];
  d.l = pe->shape[0];
  d.world = w;
  d.rank = ctx->rank;
  d.chunks = static_cast<int>((d.t + kChunk - 1) / kChunk);
  // Enough blocks to cover the GPU when there are few tokens: split every row into parts.
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  d.parts = 1;
  while (static_cast<int64_t>(d.chunks) * w * d.parts < 2 * sms &&
         d.h * 2 / 16 / (2 * d.parts) >= 64)
    d.parts *= 2;
  char* p = static_cast<char*>(ctx->workspace.data);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* q = p + off;
    off += Align(bytes);
    return q;
  };
  const size_t chunks = static_cast<size_t>(w) * d.chunks;
  st->work.counts = reinterpret_cast<int32_t*>(take(chunks * 4));
  st->work.offsets = reinterpret_cast<int32_t*>(take(chunks * 4));
  st->work.per_expert = reinterpret_cast<int32_t*>(take(d.l * 4));
  if (off > ctx->workspace.nbytes || cudaMalloc(&st->work.epoch, sizeof(uint32_t)) != cudaSuccess) {
    delete st;
    return 1;
  }
  if (cudaMemsetAsync(st->work.epoch, 0, sizeof(uint32_t), ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
    cudaFree(st->work.epoch);
    delete st;
    return 1;
  }
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 1;
  const Dims& d = st->dims;
  const int w = d.world;
  cudaStream_t s = ctx->stream;
  const Peers x = PeersOf(*kf_input(ctx, "x"), w);
  const Peers idx = PeersOf(*kf_input(ctx, "topk_idx"), w);
  const Peers wt = PeersOf(*kf_input(ctx, "topk_weights"), w);
  Peers pads = {};
  for (int q = 0; q < w; ++q) pads.p[q] = ctx->signal_pad.peers[q];
  Outs out;
  out.x = static_cast<__nv_bfloat16*>(kf_output(ctx, "recv_x")->data);
  out.src = static_cast<int32_t*>(kf_output(ctx, "recv_src_idx")->data);
  out.idx = static_cast<int64_t*>(kf_output(ctx, "recv_topk_idx")->data);
  out.w = static_cast<float*>(kf_output(ctx, "recv_topk_weights")->data);

  Start<<<1, 32, 0, s>>>(st->work, d, pads);
  Count<<<dim3(d.chunks, w), kChunk, 0, s>>>(idx, st->work, d);
  Scan<<<1, 1024, 0, s>>>(
      st->work, d, static_cast<int64_t*>(kf_output(ctx, "num_recv")->data),
      static_cast<int64_t*>(kf_output(ctx, "num_recv_tokens_per_expert")->data));
  Copy<<<dim3(d.chunks, w, d.parts), kCopyWarps * 32, 0, s>>>(x, idx, wt, st->work, d, out);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (cudaFree(st->work.epoch) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
