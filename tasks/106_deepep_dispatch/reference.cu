// DeepEP dispatch baseline, the way an NCCL expert-parallel layer does it (Megatron-LM's
// all-to-all token dispatcher, DeepEP's own tests' reference): the counts first, then the
// rows.
//   1. One block per destination d lists, in token order, the tokens with an expert on d
//      (a block-wide scan) and counts them; the rows, their routing and their indices are
//      packed into d's slot of the send buffers (T rows each).
//   2. One all-to-all of the counts, the counts to the host (the stream stops there).
//   3. Four variable-count all-to-alls (NCCL's grouped send/recv): rows, topk_idx,
//      topk_weights, source indices, straight into the outputs; what arrives is grouped by
//      source rank in rank order and in token order within one.
//   4. The routing remapped to local experts on the receiver (-1 and weight 0 elsewhere),
//      the per-expert counts and num_recv.
#include <cuda_bf16.h>
#include <stdint.h>

#include <vector>

#include "kforge/kernel.h"

namespace {

constexpr int kScanThreads = 1024;
constexpr int kWarps = 8;

struct Dims {
  int64_t t, h, k, l;
  int world, rank;
};

struct Work {
  __nv_bfloat16* send_x;  // [W][T][H]
  int64_t* send_idx;      // [W][T][k]
  float* send_w;          // [W][T][k]
  int32_t* send_src;      // [W][T]
  int32_t* lists;         // [W][T]: the tokens going to d, in order
  int64_t* send_counts;   // [W]
  int64_t* recv_counts;   // [W]
  int32_t* per_expert;    // [L]
};

// A warp copies one row: 16-byte accesses where both ends and the length allow, else 2 bytes.
__device__ void CopyRow(char* dst, const char* src, int64_t bytes, int lane) {
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes) & 15) == 0) {
    for (int64_t i = lane; i < bytes / 16; i += 32)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  } else {
    for (int64_t i = lane; i < bytes / 2; i += 32)
      reinterpret_cast<uint16_t*>(dst)[i] = reinterpret_cast<const uint16_t*>(src)[i];
  }
}

__device__ bool GoesTo(const int64_t* idx, int64_t t, int64_t k, int64_t lo, int64_t hi) {
  bool hit = false;
  for (int64_t s = 0; s < k; ++s) {
    const int64_t e = idx[t * k + s];
    hit = hit || (e >= lo && e < hi);
  }
  return hit;
}

// Block d: the ordered list of tokens with an expert on rank d, and their count.
__global__ void __launch_bounds__(kScanThreads)
    ListTokens(const int64_t* __restrict__ idx, Dims d, Work w) {
  __shared__ int warp_sums[kScanThreads / 32];
  __shared__ int carry;
  const int dest = blockIdx.x;
  const int64_t lo = dest * d.l, hi = lo + d.l;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t base = 0; base < d.t; base += kScanThreads) {
    const int64_t t = base + threadIdx.x;
    const bool hit = t < d.t && GoesTo(idx, t, d.k, lo, hi);
    const unsigned ballot = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_sums[warp] = __popc(ballot);
    __syncthreads();
    int before = carry;
    for (int i = 0; i < warp; ++i) before += warp_sums[i];
    before += __popc(ballot & ((1u << lane) - 1u));
    if (hit) w.lists[dest * d.t + before] = static_cast<int32_t>(t);
    __syncthreads();
    if (threadIdx.x == 0) {
      int total = 0;
      for (int i = 0; i < kScanThreads / 32; ++i) total += warp_sums[i];
      carry += total;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) w.send_counts[dest] = carry;
}

// Block (c, d): warp i packs row c * kWarps + i of d's list into d's slot.
__global__ void __launch_bounds__(kWarps * 32)
    Pack(const __nv_bfloat16* __restrict__ x, const int64_t* __restrict__ idx,
         const float* __restrict__ wt, Dims d, Work w) {
  const int dest = blockIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (i >= w.send_counts[dest]) return;
  const int64_t t = w.lists[dest * d.t + i];
  const int64_t row = dest * d.t + i;
  CopyRow(reinterpret_cast<char*>(w.send_x + row * d.h), reinterpret_cast<const char*>(x + t * d.h),
          d.h * 2, lane);
  for (int64_t s = lane; s < d.k; s += 32) {
    w.send_idx[row * d.k + s] = idx[t * d.k + s];
    w.send_w[row * d.k + s] = wt[t * d.k + s];
  }
  if (lane == 0) w.send_src[row] = static_cast<int32_t>(t);
}

// Row j of what arrived: the routing remapped to this rank's experts, counted per expert.
__global__ void Remap(int64_t* recv_idx, float* recv_w, int64_t n, Dims d, Work w) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * d.k) return;
  const int64_t lo = d.rank * d.l;
  const int64_t e = recv_idx[i];
  if (e >= lo && e < lo + d.l) {
    recv_idx[i] = e - lo;
    atomicAdd(&w.per_expert[e - lo], 1);
  } else {
    recv_idx[i] = -1;
    recv_w[i] = 0.f;
  }
}

__global__ void WriteCounts(const int32_t* per_expert, int64_t l, int64_t n,
                            int64_t* out_per_expert, int64_t* num_recv) {
  for (int64_t i = threadIdx.x; i < l; i += blockDim.x) out_per_expert[i] = per_expert[i];
  if (threadIdx.x == 0) *num_recv = n;
}

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

struct State {
  Dims dims;
  Work work;
  std::vector<int64_t> send_counts, recv_counts;
  std::vector<size_t> sc, sd, rc, rd;
};

int Check(cudaError_t e) { return e == cudaSuccess ? 0 : 1; }

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int w = ctx->world_size;
  if (w < 1 || w > KF_MAX_RANKS) return 1;
  const kf_tensor* x = kf_input(ctx, "x");
  const kf_tensor* idx = kf_input(ctx, "topk_idx");
  const kf_tensor* pe = kf_output(ctx, "num_recv_tokens_per_expert");
  if (x == nullptr || idx == nullptr || pe == nullptr || x->ndim != 2 || idx->ndim != 2) return 1;
  State* st = new State;
  Dims& d = st->dims;
  d.t = x->shape[0];
  d.h = x->shape[1];
  d.k = idx->shape[1];
  d.l = pe->shape[0];
  d.world = w;
  d.rank = ctx->rank;
  // Carve the workspace.
  char* p = static_cast<char*>(ctx->workspace.data);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* q = p + off;
    off += Align(bytes);
    return q;
  };
  const size_t rows = static_cast<size_t>(w * d.t);
  st->work.send_x = reinterpret_cast<__nv_bfloat16*>(take(rows * d.h * 2));
  st->work.send_idx = reinterpret_cast<int64_t*>(take(rows * d.k * 8));
  st->work.send_w = reinterpret_cast<float*>(take(rows * d.k * 4));
  st->work.send_src = reinterpret_cast<int32_t*>(take(rows * 4));
  st->work.lists = reinterpret_cast<int32_t*>(take(rows * 4));
  st->work.send_counts = reinterpret_cast<int64_t*>(take(w * 8));
  st->work.recv_counts = reinterpret_cast<int64_t*>(take(w * 8));
  st->work.per_expert = reinterpret_cast<int32_t*>(take(d.l * 4));
  if (off > ctx->workspace.nbytes) {
    delete st;
    return 1;
  }
  st->send_counts.resize(w);
  st->recv_counts.resize(w);
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
  const Dims& d = st->dims;
  const Work& w = st->work;
  const int world = d.world;
  cudaStream_t s = ctx->stream;
  const auto* x = static_cast<const __nv_bfloat16*>(kf_input(ctx, "x")->data);
  const auto* idx = static_cast<const int64_t*>(kf_input(ctx, "topk_idx")->data);
  const auto* wt = static_cast<const float*>(kf_input(ctx, "topk_weights")->data);
  void* recv_x = kf_output(ctx, "recv_x")->data;
  void* recv_src = kf_output(ctx, "recv_src_idx")->data;
  auto* recv_idx = static_cast<int64_t*>(kf_output(ctx, "recv_topk_idx")->data);
  auto* recv_w = static_cast<float*>(kf_output(ctx, "recv_topk_weights")->data);

  ListTokens<<<world, kScanThreads, 0, s>>>(idx, d, w);
  const dim3 pack_grid(static_cast<unsigned>((d.t + kWarps - 1) / kWarps),
                       static_cast<unsigned>(world));
  Pack<<<pack_grid, kWarps * 32, 0, s>>>(x, idx, wt, d, w);
  if (Check(cudaGetLastError())) return 1;

  // The counts, then the host.
  if (kf_all_to_all(ctx, w.send_counts, w.recv_counts, 1, KF_I64) != 0) return 1;
  if (Check(cudaMemcpyAsync(st->send_counts.data(), w.send_counts, world * 8,
                            cudaMemcpyDeviceToHost, s)) ||
      Check(cudaMemcpyAsync(st->recv_counts.data(), w.recv_counts, world * 8,
                            cudaMemcpyDeviceToHost, s)) ||
      Check(cudaStreamSynchronize(s)))
    return 1;
  int64_t n = 0;
  for (int q = 0; q < world; ++q) {
    st->sc[q] = static_cast<size_t>(st->send_counts[q]);
    st->sd[q] = static_cast<size_t>(q * d.t);
    st->rc[q] = static_cast<size_t>(st->recv_counts[q]);
    st->rd[q] = static_cast<size_t>(n);
    n += st->recv_counts[q];
  }
  // Four all-to-alls, each with its element counts (rows times the row length).
  auto scaled = [&](const std::vector<size_t>& v, int64_t f) {
    std::vector<size_t> o(v.size());
    for (size_t i = 0; i < v.size(); ++i) o[i] = v[i] * static_cast<size_t>(f);
    return o;
  };
  struct Leg {
    const void* send;
    void* recv;
    int64_t per_row;
    kf_dtype dt;
  };
  const Leg legs[] = {{w.send_x, recv_x, d.h, KF_BF16},
                      {w.send_idx, recv_idx, d.k, KF_I64},
                      {w.send_w, recv_w, d.k, KF_F32},
                      {w.send_src, recv_src, 1, KF_I32}};
  for (const Leg& leg : legs) {
    const auto sc = scaled(st->sc, leg.per_row), sd = scaled(st->sd, leg.per_row);
    const auto rc = scaled(st->rc, leg.per_row), rd = scaled(st->rd, leg.per_row);
    if (kf_all_to_allv(ctx, leg.send, sc.data(), sd.data(), leg.recv, rc.data(), rd.data(),
                       leg.dt) != 0)
      return 1;
  }

  if (Check(cudaMemsetAsync(w.per_expert, 0, d.l * 4, s))) return 1;
  if (n > 0) {
    const int64_t items = n * d.k;
    Remap<<<static_cast<unsigned>((items + 255) / 256), 256, 0, s>>>(recv_idx, recv_w, n, d, w);
  }
  WriteCounts<<<1, 256, 0, s>>>(
      w.per_expert, d.l, n,
      static_cast<int64_t*>(kf_output(ctx, "num_recv_tokens_per_expert")->data),
      static_cast<int64_t*>(kf_output(ctx, "num_recv")->data));
  return Check(cudaGetLastError());
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  delete st;
  ctx->user = nullptr;
  return 0;
}
