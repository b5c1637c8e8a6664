// DeepEP combine baseline, the way an NCCL expert-parallel layer does it (Megatron-LM's
// all-to-all token dispatcher: all_to_all_single back, then unpermute with the probs):
//   1. On the token's rank: one block per expert rank d scans the tokens for the
//      (token, slot) pairs whose expert lives on d: their number and, per token, how many
//      come before it (where its rows sit among d's rows for this rank).
//   2. One all-to-all of those counts (how many rows each expert rank returns), the counts to
//      the host (the stream stops there).
//   3. One variable-count all-to-all (NCCL's grouped send/recv) of every (token, expert) row:
//      an expert rank's rows for source p are one contiguous range of expert_out.
//   4. The unpermute: out[t] = sum over slots of weight * its row, in fp32, written as bf16.
#include <cuda_bf16.h>
#include <stdint.h>

#include <vector>

#include "kforge/kernel.h"

namespace {

constexpr int kScanThreads = 1024;
constexpr int kThreads = 256;

struct Dims {
  int64_t t, h, k, l;
  int world, rank;
  int64_t recv_at[KF_MAX_RANKS];  // first received row from expert rank d
};

// Block d: base[d * T + t] = the pairs of tokens before t with an expert on d; counts[d] = all.
__global__ void __launch_bounds__(kScanThreads)
    PairPrefix(const int64_t* __restrict__ idx, Dims d, int32_t* base, int64_t* counts) {
  __shared__ int warp_sums[kScanThreads / 32];
  __shared__ int carry;
  const int dest = blockIdx.x;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t start = 0; start < d.t; start += kScanThreads) {
    const int64_t t = start + threadIdx.x;
    int n = 0;
    if (t < d.t)
      for (int64_t s = 0; s < d.k; ++s) n += idx[t * d.k + s] / d.l == dest ? 1 : 0;
    int incl = n;
    for (int o = 1; o < 32; o *= 2) {
      const int u = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += u;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    int before = carry;
    for (int i = 0; i < warp; ++i) before += warp_sums[i];
    if (t < d.t) base[dest * d.t + t] = before + incl - n;
    __syncthreads();
    if (threadIdx.x == 0) {
      int total = 0;
      for (int i = 0; i < kScanThreads / 32; ++i) total += warp_sums[i];
      carry += total;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) counts[dest] = carry;
}

// Block t: out[t] = sum over slots s of w[t][s] * (the row of (t, s) among what came back).
__global__ void __launch_bounds__(kThreads)
    Unpermute(const __nv_bfloat16* __restrict__ rows, const int64_t* __restrict__ idx,
              const float* __restrict__ wt, const int32_t* __restrict__ base, Dims d,
              __nv_bfloat16* out) {
  __shared__ int64_t row_of[32];
  __shared__ float weight_of[32];
  const int64_t t = blockIdx.x;
  if (threadIdx.x == 0) {
    for (int64_t s = 0; s < d.k; ++s) {
      const int64_t dest = idx[t * d.k + s] / d.l;
      int before = 0;  // earlier slots of t on the same rank
      for (int64_t u = 0; u < s; ++u) before += idx[t * d.k + u] / d.l == dest ? 1 : 0;
      row_of[s] = d.recv_at[dest] + base[dest * d.t + t] + before;
      weight_of[s] = wt[t * d.k + s];
    }
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < d.h; c += kThreads) {
    float acc = 0.f;
    for (int64_t s = 0; s < d.k; ++s)
      acc += weight_of[s] * __bfloat162float(rows[row_of[s] * d.h + c]);
    out[t * d.h + c] = __float2bfloat16_rn(acc);
  }
}

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

struct State {
  Dims dims;
  __nv_bfloat16* rows;  // [T * k][H]: every (token, slot) row, back from its expert rank
  int32_t* base;        // [W][T]
  int64_t* want;        // [W]: rows this rank gets back from each expert rank
  int64_t* give;        // [W]: rows this rank returns to each source rank
  std::vector<int64_t> want_h, give_h;
  std::vector<size_t> sc, sd, rc, rd;
};

int Check(cudaError_t e) { return e == cudaSuccess ? 0 : 1; }

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int w = ctx->world_size;
  if (w < 1 || w > KF_MAX_RANKS) return 1;
  const kf_tensor* idx = kf_input(ctx, "topk_idx");
  const kf_tensor* y = kf_input(ctx, "expert_out");
  if (idx == nullptr || y == nullptr || idx->ndim != 2 || y->ndim != 2 || idx->shape[1] > 32)
    return 1;
  State* st = new State;
  Dims& d = st->dims;
  d.t = idx->shape[0];
  d.k = idx->shape[1];
  d.h = y->shape[1];
  d.l = static_cast<int64_t>(kf_param(ctx, "E", 0)) / w;
  d.world = w;
  d.rank = ctx->rank;
  if (d.l < 1) {
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
  st->rows = reinterpret_cast<__nv_bfloat16*>(take(static_cast<size_t>(d.t * d.k * d.h) * 2));
  st->base = reinterpret_cast<int32_t*>(take(static_cast<size_t>(w * d.t) * 4));
  st->want = reinterpret_cast<int64_t*>(take(w * 8));
  st->give = reinterpret_cast<int64_t*>(take(w * 8));
  if (off > ctx->workspace.nbytes) {
    delete st;
    return 1;
  }
  st->want_h.resize(w);
  st->give_h.resize(w);
  st->sc.resize(w);
  st->sd.resize(w);
  st->rc.resize(w);
  st->rd.resize(w);
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 1;
  Dims& d = st->dims;
  const int w = d.world;
  cudaStream_t s = ctx->stream;
  const auto* idx = static_cast<const int64_t*>(kf_input(ctx, "topk_idx")->data);
  const auto* wt = static_cast<const float*>(kf_input(ctx, "topk_weights")->data);
  const void* y = kf_input(ctx, "expert_out")->data;

  PairPrefix<<<w, kScanThreads, 0, s>>>(idx, d, st->base, st->want);
  if (Check(cudaGetLastError())) return 1;
  if (kf_all_to_all(ctx, st->want, st->give, 1, KF_I64) != 0) return 1;
  if (Check(cudaMemcpyAsync(st->want_h.data(), st->want, w * 8, cudaMemcpyDeviceToHost, s)) ||
      Check(cudaMemcpyAsync(st->give_h.data(), st->give, w * 8, cudaMemcpyDeviceToHost, s)) ||
      Check(cudaStreamSynchronize(s)))
    return 1;
  size_t sent = 0, got = 0;
  for (int q = 0; q < w; ++q) {
    st->sc[q] = static_cast<size_t>(st->give_h[q] * d.h);
    st->sd[q] = sent;
    sent += st->sc[q];
    st->rc[q] = static_cast<size_t>(st->want_h[q] * d.h);
    st->rd[q] = got;
    d.recv_at[q] = static_cast<int64_t>(got / static_cast<size_t>(d.h));
    got += st->rc[q];
  }
  if (kf_all_to_allv(ctx, y, st->sc.data(), st->sd.data(), st->rows, st->rc.data(), st->rd.data(),
                     KF_BF16) != 0)
    return 1;
  if (d.t > 0)
    Unpermute<<<static_cast<unsigned>(d.t), kThreads, 0, s>>>(
        st->rows, idx, wt, st->base, d, static_cast<__nv_bfloat16*>(kf_output(ctx, "out")->data));
  return Check(cudaGetLastError());
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  delete st;
  ctx->user = nullptr;
  return 0;
}
