// Drop-and-pad MoE dispatch with the selection on the expert's rank and direct NVLink pulls:
//   Round:  flag barrier: every peer is in this call (its tokens and routing are readable).
//   Gather: every source's routing (T * k indices and probabilities) copied here once.
//   Select: block (l, p) ranks the candidates of local expert l among source p's routing and
//           lists the C it keeps, in token order; their probabilities go straight to y_probs.
//   Copy:   block (c, l*W + p): warp i copies kept row c * 8 + i from p's x, or writes a zero
//           padding row, so that padding never crosses a link.
// Only peers' inputs are read and only this rank's outputs and workspace written, so no end
// barrier is needed.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = 8;

struct Peers {
  const void* p[KF_MAX_RANKS];
};

struct Dims {
  int64_t t, h, k, e, l, cap;
  int world, rank;
};

__global__ void Round(Peers pads, Dims d, uint32_t* epoch_ptr) {
  const uint32_t epoch = *epoch_ptr + 1;
  const int q = threadIdx.x;
  if (q < d.world && q != d.rank) {
    kf_signal(static_cast<uint32_t*>(const_cast<void*>(pads.p[q])) + d.rank, epoch);
    kf_wait(static_cast<const uint32_t*>(pads.p[d.rank]) + q, epoch);
  }
  __syncthreads();
  if (threadIdx.x == 0) *epoch_ptr = epoch;
}

// Block (l, p): the tokens of source p that local expert l keeps (the C most probable, ties to
// the lower token), in token order, into list[j * cap ..] (j = l * W + p) and their
// probabilities into y_probs[j * cap ..] (zeros past them); count[j] = how many. Dynamic shared
// memory: T candidates (token, prob).
__global__ void __launch_bounds__(kThreads)
    Select(Peers idx_p, Peers probs_p, Dims d, int32_t* list, float* kept_probs, int32_t* count) {
  extern __shared__ int32_t cand_t[];
  float* cand_p = reinterpret_cast<float*>(cand_t + d.t);
  __shared__ int32_t warp_sums[kThreads / 32];
  __shared__ int32_t carry;
  const int64_t l = blockIdx.x, p = blockIdx.y;
  const int64_t e = d.rank * d.l + l, slot = l * d.world + p;
  const int64_t* __restrict__ idx = reinterpret_cast<const int64_t*>(idx_p.p[p]);
  const float* __restrict__ probs = reinterpret_cast<const float*>(probs_p.p[p]);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // 1. Candidates in token order.
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int64_t base = 0; base < d.t; base += kThreads) {
    const int64_t t = base + threadIdx.x;
    float p = 0.f;
    bool hit = false;
    if (t < d.t)
      for (int64_t s = 0; s < d.k; ++s)
        if (idx[t * d.k + s] == e) {
          hit = true;
          p = probs[t * d.k + s];
        }
    const unsigned b = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_sums[warp] = __popc(b);
    __syncthreads();
    int32_t before = carry;
    for (int i = 0; i < warp; ++i) before += warp_sums[i];
    before += __popc(b & ((1u << lane) - 1u));
    if (hit) {
      cand_t[before] = static_cast<int32_t>(t);
      cand_p[before] = p;
    }
    __syncthreads();
    if (threadIdx.x == 0)
      for (int i = 0; i < kThreads / 32; ++i) carry += warp_sums[i];
    __syncthreads();
  }
  const int32_t n = carry;
  // 2. Keep a candidate when fewer than C others beat it (higher prob, or equal and earlier);
  // 3. its row is the number of kept candidates before it (token order).
  __syncthreads();
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int32_t base = 0; base < n; base += kThreads) {
    const int32_t i = base + threadIdx.x;
    bool keep = false;
    if (i < n) {
      if (n <= d.cap) {
        keep = true;
      } else {
        const float pi = cand_p[i];
        int32_t beats = 0;
        for (int32_t j = 0; j < n && beats < d.cap; ++j) {
          const float pj = cand_p[j];
          beats += (pj > pi || (pj == pi && j < i)) ? 1 : 0;
        }
        keep = beats < d.cap;
      }
    }
    const unsigned b = __ballot_sync(0xffffffffu, keep);
    if (lane == 0) warp_sums[warp] = __popc(b);
    __syncthreads();
    int32_t before = carry;
    for (int w = 0; w < warp; ++w) before += warp_sums[w];
    before += __popc(b & ((1u << lane) - 1u));
    if (keep) {
      list[slot * d.cap + before] = cand_t[i];
      kept_probs[slot * d.cap + before] = cand_p[i];
    }
    __syncthreads();
    if (threadIdx.x == 0)
      for (int w = 0; w < kThreads / 32; ++w) carry += warp_sums[w];
    __syncthreads();
  }
  if (threadIdx.x == 0) count[slot] = carry;
  for (int64_t i = carry + threadIdx.x; i < d.cap; i += kThreads)
    kept_probs[slot * d.cap + i] = 0.f;
}

// A warp copies one row: 16-byte accesses where both ends and the length allow, else 2 bytes;
// src == nullptr writes zeros.
__device__ void CopyRow(char* dst, const char* src, int64_t bytes, int lane) {
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes) & 15) == 0) {
    for (int64_t i = lane; i < bytes / 16; i += 32)
      reinterpret_cast<uint4*>(dst)[i] =
          src ? reinterpret_cast<const uint4*>(src)[i] : make_uint4(0, 0, 0, 0);
  } else {
    for (int64_t i = lane; i < bytes / 2; i += 32)
      reinterpret_cast<uint16_t*>(dst)[i] = src ? reinterpret_cast<const uint16_t*>(src)[i] : 0;
  }
}

// Block (c, p): source p's routing into this rank's workspace.
__global__ void Gather(Peers idx, Peers probs, Dims d, int64_t* ridx, float* rprob) {
  const int64_t p = blockIdx.y, n = d.t * d.k;
  const int64_t* src_i = static_cast<const int64_t*>(idx.p[p]);
  const float* src_p = static_cast<const float*>(probs.p[p]);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    ridx[p * n + i] = src_i[i];
    rprob[p * n + i] = src_p[i];
  }
}

// Block (c, j), j = l * W + p: warp i writes row c * kWarps + i of y[l][p].
__global__ void Copy(Peers x, const int32_t* list, const int32_t* count, Dims d, __nv_bfloat16* y) {
  const int64_t j = blockIdx.y, p = j % d.world;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (i >= d.cap) return;
  const char* src = i < count[j] ? static_cast<const char*>(x.p[p]) +
                                       static_cast<int64_t>(list[j * d.cap + i]) * d.h * 2
                                 : nullptr;
  CopyRow(reinterpret_cast<char*>(y + (j * d.cap + i) * d.h), src, d.h * 2, threadIdx.x % 32);
}

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

struct State {
  Dims dims;
  int32_t *list, *count;
  int64_t* ridx;  // [W][T * k]: every source's routing, gathered
  float* rprob;
  uint32_t* epoch = nullptr;
  size_t smem;
};

Peers PeersOf(void* const* ptrs, int world) {
  Peers p = {};
  for (int q = 0; q < world; ++q) p.p[q] = ptrs[q];
  return p;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int w = ctx->world_size;
  if (w < 1 || w > KF_MAX_RANKS) return 1;
  const kf_tensor* x = kf_input(ctx, "x");
  const kf_tensor* idx = kf_input(ctx, "topk_idx");
  const kf_tensor* y = kf_output(ctx, "y");
  if (x == nullptr || idx == nullptr || y == nullptr || y->ndim != 4) return 1;
  if (ctx->signal_pad.nbytes < sizeof(uint32_t) * w) return 1;
  State* st = new State;
  Dims& d = st->dims;
  d.t = x->shape[0];
  d.h = x->shape[1];
  d.k = idx->shape[1];
  d.l = y->shape[0];
  d.cap = y->shape[2];
  d.e = d.l * w;
  d.world = w;
  d.rank = ctx->rank;
  st->smem = static_cast<size_t>(d.t) * 8;
  char* base = static_cast<char*>(ctx->workspace.data);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* q = base + off;
    off += Align(bytes);
    return q;
  };
  const size_t routing = static_cast<size_t>(w * d.t * d.k);
  st->list = reinterpret_cast<int32_t*>(take(static_cast<size_t>(d.e * d.cap) * 4));
  st->count = reinterpret_cast<int32_t*>(take(d.e * 4));
  st->ridx = reinterpret_cast<int64_t*>(take(routing * 8));
  st->rprob = reinterpret_cast<float*>(take(routing * 4));
  if ((ctx->gpu.smem_per_block_optin > 0 && st->smem > ctx->gpu.smem_per_block_optin) ||
      off > ctx->workspace.nbytes ||
      cudaFuncSetAttribute(Select, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(st->smem)) != cudaSuccess ||
      cudaMalloc(&st->epoch, sizeof(uint32_t)) != cudaSuccess) {
    delete st;
    return 1;
  }
  if (cudaMemsetAsync(st->epoch, 0, sizeof(uint32_t), ctx->stream) != cudaSuccess ||
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
  const Dims& d = st->dims;
  const int w = d.world;
  cudaStream_t s = ctx->stream;
  const Peers pads = PeersOf(ctx->signal_pad.peers, w);
  const Peers x = PeersOf(kf_input(ctx, "x")->peers, w);
  const Peers idx = PeersOf(kf_input(ctx, "topk_idx")->peers, w);
  const Peers probs = PeersOf(kf_input(ctx, "topk_probs")->peers, w);
  Peers local_idx = {}, local_probs = {};
  for (int q = 0; q < w; ++q) {
    local_idx.p[q] = st->ridx + q * d.t * d.k;
    local_probs.p[q] = st->rprob + q * d.t * d.k;
  }
  Round<<<1, 32, 0, s>>>(pads, d, st->epoch);
  const unsigned gather_blocks =
      static_cast<unsigned>((d.t * d.k + 1023) / 1024 < 16 ? (d.t * d.k + 1023) / 1024 : 16);
  Gather<<<dim3(gather_blocks, w), 1024, 0, s>>>(idx, probs, d, st->ridx, st->rprob);
  Select<<<dim3(static_cast<unsigned>(d.l), w), kThreads, st->smem, s>>>(
      local_idx, local_probs, d, st->list, static_cast<float*>(kf_output(ctx, "y_probs")->data),
      st->count);
  const unsigned chunks = static_cast<unsigned>((d.cap + kWarps - 1) / kWarps);
  Copy<<<dim3(chunks, static_cast<unsigned>(d.e)), kWarps * 32, 0, s>>>(
      x, st->list, st->count, d, static_cast<__nv_bfloat16*>(kf_output(ctx, "y")->data));
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
