// Megatron-LM drop-and-pad dispatch baseline over NCCL (moe_utils.py
// apply_router_token_dropping + MoEAlltoAllTokenDispatcher with
// moe_pad_expert_input_to_capacity):
//   1. one block per expert selects, from this rank's routing, the tokens it keeps (the C most
//      probable, ties to the lower token, then in token order);
//   2. the permute: the kept rows into an [E, C, H] send buffer, padding rows zeroed, and their
//      probabilities into [E, C];
//   3. two all-to-alls with equal splits (L * C rows and probabilities per peer): no counts,
//      no host round trip, since every expert takes exactly C rows;
//   4. sort_chunks_by_idxs: [W, L, C] as received into [L, W, C].
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = 8;

struct Dims {
  int64_t t, h, k, e, l, cap;
  int world;
};

// Block e: the kept tokens of expert e among `idx`/`probs` (one rank's routing), in token
// order, into list[e * cap ..] and their probabilities into kept_probs; count[e] = how many.
// Dynamic shared memory: T candidates (token, prob).
__global__ void __launch_bounds__(kThreads)
    Select(const int64_t* __restrict__ idx, const float* __restrict__ probs, Dims d, int32_t* list,
           float* kept_probs, int32_t* count) {
  extern __shared__ int32_t cand_t[];
  float* cand_p = reinterpret_cast<float*>(cand_t + d.t);
  __shared__ int32_t warp_sums[kThreads / 32];
  __shared__ int32_t carry;
  const int64_t e = blockIdx.x;
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
      list[e * d.cap + before] = cand_t[i];
      kept_probs[e * d.cap + before] = cand_p[i];
    }
    __syncthreads();
    if (threadIdx.x == 0)
      for (int w = 0; w < kThreads / 32; ++w) carry += warp_sums[w];
    __syncthreads();
  }
  if (threadIdx.x == 0) count[e] = carry;
  for (int64_t i = carry + threadIdx.x; i < d.cap; i += kThreads) kept_probs[e * d.cap + i] = 0.f;
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

// Block (c, e): warp i writes row c * kWarps + i of expert e's C rows.
__global__ void Pack(const __nv_bfloat16* __restrict__ x, const int32_t* list, const int32_t* count,
                     Dims d, __nv_bfloat16* send) {
  const int64_t e = blockIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (i >= d.cap) return;
  const char* src =
      i < count[e] ? reinterpret_cast<const char*>(x + list[e * d.cap + i] * d.h) : nullptr;
  CopyRow(reinterpret_cast<char*>(send + (e * d.cap + i) * d.h), src, d.h * 2, threadIdx.x % 32);
}

// Block (c, j), j = p * L + l as received: warp i moves row c * kWarps + i to y[l][p].
__global__ void SortChunks(const __nv_bfloat16* __restrict__ recv, const float* __restrict__ recv_p,
                           Dims d, __nv_bfloat16* y, float* y_probs) {
  const int64_t j = blockIdx.y, p = j / d.l, l = j % d.l;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (i >= d.cap) return;
  const int64_t from = j * d.cap + i, to = (l * d.world + p) * d.cap + i;
  CopyRow(reinterpret_cast<char*>(y + to * d.h), reinterpret_cast<const char*>(recv + from * d.h),
          d.h * 2, threadIdx.x % 32);
  if (threadIdx.x % 32 == 0) y_probs[to] = recv_p[from];
}

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

struct State {
  Dims dims;
  __nv_bfloat16 *send, *recv;
  float *send_p, *recv_p;
  int32_t *list, *count;
  size_t smem;
};

int Check(cudaError_t e) { return e == cudaSuccess ? 0 : 1; }

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int w = ctx->world_size;
  const kf_tensor* x = kf_input(ctx, "x");
  const kf_tensor* idx = kf_input(ctx, "topk_idx");
  const kf_tensor* y = kf_output(ctx, "y");
  if (x == nullptr || idx == nullptr || y == nullptr || y->ndim != 4) return 1;
  State* st = new State;
  Dims& d = st->dims;
  d.t = x->shape[0];
  d.h = x->shape[1];
  d.k = idx->shape[1];
  d.l = y->shape[0];
  d.cap = y->shape[2];
  d.e = d.l * w;
  d.world = w;
  st->smem = static_cast<size_t>(d.t) * 8;
  if ((ctx->gpu.smem_per_block_optin > 0 && st->smem > ctx->gpu.smem_per_block_optin) ||
      Check(cudaFuncSetAttribute(Select, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(st->smem)))) {
    delete st;
    return 1;
  }
  char* p = static_cast<char*>(ctx->workspace.data);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* q = p + off;
    off += Align(bytes);
    return q;
  };
  const size_t rows = static_cast<size_t>(d.e * d.cap);
  st->send = reinterpret_cast<__nv_bfloat16*>(take(rows * d.h * 2));
  st->recv = reinterpret_cast<__nv_bfloat16*>(take(rows * d.h * 2));
  st->send_p = reinterpret_cast<float*>(take(rows * 4));
  st->recv_p = reinterpret_cast<float*>(take(rows * 4));
  st->list = reinterpret_cast<int32_t*>(take(rows * 4));
  st->count = reinterpret_cast<int32_t*>(take(d.e * 4));
  if (off > ctx->workspace.nbytes) {
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
  cudaStream_t s = ctx->stream;
  const auto* x = static_cast<const __nv_bfloat16*>(kf_input(ctx, "x")->data);
  Select<<<static_cast<unsigned>(d.e), kThreads, st->smem, s>>>(
      static_cast<const int64_t*>(kf_input(ctx, "topk_idx")->data),
      static_cast<const float*>(kf_input(ctx, "topk_probs")->data), d, st->list, st->send_p,
      st->count);
  const unsigned chunks = static_cast<unsigned>((d.cap + kWarps - 1) / kWarps);
  Pack<<<dim3(chunks, static_cast<unsigned>(d.e)), kWarps * 32, 0, s>>>(x, st->list, st->count, d,
                                                                        st->send);
  if (Check(cudaGetLastError())) return 1;
  if (kf_all_to_all(ctx, st->send, st->recv, static_cast<size_t>(d.l * d.cap * d.h), KF_BF16) !=
          0 ||
      kf_all_to_all(ctx, st->send_p, st->recv_p, static_cast<size_t>(d.l * d.cap), KF_F32) != 0)
    return 1;
  SortChunks<<<dim3(chunks, static_cast<unsigned>(d.e)), kWarps * 32, 0, s>>>(
      st->recv, st->recv_p, d, static_cast<__nv_bfloat16*>(kf_output(ctx, "y")->data),
      static_cast<float*>(kf_output(ctx, "y_probs")->data));
  return Check(cudaGetLastError());
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  delete static_cast<State*>(ctx->user);
  ctx->user = nullptr;
  return 0;
}
