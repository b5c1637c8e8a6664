// Link-prediction ranking baseline, as PKB's reference does it: every rank's row count into a
// vector of W counts (zeros but its own), an all-reduce of the counts, the counts to the host
// (.tolist()), then the positive and the negative scores "broadcast" with a variable-count
// all-to-all in which every rank sends its whole local tensor to every peer (kf_all_to_allv: NCCL's
// grouped send/recv on real GPUs), so that every rank holds every rank's rows in rank order; then
// every rank ranks all T rows. PKB materialises the send buffer as data.repeat(W); here the W sends
// all read the local tensor itself (the same exchange, without the copy). PKB's ranking is
// torch.sort of the bf16 sigmoids; here it is the task's comparison count (a warp per row), which
// a sort would only make slower.
#include <cuda_bf16.h>
#include <stdint.h>

#include <vector>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__global__ void OwnCount(int64_t* sizes, int world, int rank, int64_t n) {
  const int p = static_cast<int>(threadIdx.x);
  if (p < world) sizes[p] = p == rank ? n : 0;
}

__device__ __forceinline__ float ToF(float v) { return v; }
__device__ __forceinline__ float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }

// How many of the values packed in a 16-byte vector are >= p.
__device__ __forceinline__ int CountGe(const uint4& v, float p, float) {
  return (__uint_as_float(v.x) >= p) + (__uint_as_float(v.y) >= p) + (__uint_as_float(v.z) >= p) +
         (__uint_as_float(v.w) >= p);
}
__device__ __forceinline__ int CountGe(const uint4& v, float p, __nv_bfloat16) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  int c = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    c += (__uint_as_float(w[i] << 16) >= p) + (__uint_as_float(w[i] & 0xffff0000u) >= p);
  return c;
}

// rankings[i] = 1 + #{ j : neg[i][j] >= pos[i] }, a warp per row.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    Rank(const T* __restrict__ pos, const T* __restrict__ neg, int64_t n, int64_t k, bool vec,
         int64_t* __restrict__ rankings) {
  const int lane = threadIdx.x % 32;
  for (int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; i < n;
       i += static_cast<int64_t>(gridDim.x) * kWarps) {
    const float p = ToF(pos[i]);
    const T* row = neg + i * k;
    int c = 0;
    if (vec) {  // rows are whole 16-byte vectors
      const uint4* v = reinterpret_cast<const uint4*>(row);
      const int64_t nv = k * static_cast<int64_t>(sizeof(T)) / 16;
#pragma unroll 4
      for (int64_t j = lane; j < nv; j += 32) c += CountGe(__ldg(v + j), p, T());
    } else {
      for (int64_t j = lane; j < k; j += 32) c += ToF(row[j]) >= p;
    }
    c = __reduce_add_sync(0xffffffffu, c);
    if (lane == 0) rankings[i] = 1 + c;
  }
}

struct State {
  std::vector<int64_t> sizes;
  std::vector<size_t> sc, sd, rc, rd, sc_neg, sd_neg, rc_neg, rd_neg;
};

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

template <typename T>
int LaunchRank(const void* pos, const void* neg, int64_t n, int64_t k, void* rankings, int sms,
               cudaStream_t s) {
  int64_t blocks = (n + kWarps - 1) / kWarps;
  if (blocks > 16 * static_cast<int64_t>(sms)) blocks = 16 * static_cast<int64_t>(sms);
  if (blocks < 1) return 0;
  const bool vec = k * static_cast<int64_t>(sizeof(T)) % 16 == 0;
  Rank<T><<<static_cast<int>(blocks), kThreads, 0, s>>>(static_cast<const T*>(pos),
                                                        static_cast<const T*>(neg), n, k, vec,
                                                        static_cast<int64_t*>(rankings));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int w = ctx->world_size;
  State* st = new State;
  st->sizes.resize(w);
  for (auto* v :
       {&st->sc, &st->sd, &st->rc, &st->rd, &st->sc_neg, &st->sd_neg, &st->rc_neg, &st->rd_neg})
    v->resize(w);
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor* pos = kf_input(ctx, "local_pos_scores");
  const kf_tensor* neg = kf_input(ctx, "local_neg_scores");
  kf_tensor* out = kf_output(ctx, "rankings");
  if (st == nullptr || pos == nullptr || neg == nullptr || out == nullptr) return 1;
  if (pos->dtype != KF_BF16 && pos->dtype != KF_F32) return 2;
  const int w = ctx->world_size;
  const int64_t n = pos->shape[0], k = neg->shape[1];
  const size_t elem = kf_dtype_size(pos->dtype);
  const int64_t cap = out->numel;  // T rows
  // counts | every rank's positives | every rank's negatives.
  char* ws = static_cast<char*>(ctx->workspace.data);
  auto* sizes = reinterpret_cast<int64_t*>(ws);
  char* all_pos = ws + Align(8 * w);
  char* all_neg = all_pos + Align(static_cast<size_t>(cap) * elem);
  if (all_neg + static_cast<size_t>(cap * k) * elem > ws + ctx->workspace.nbytes) return 1;

  OwnCount<<<1, 32 * ((w + 31) / 32), 0, ctx->stream>>>(sizes, w, ctx->rank, n);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_reduce(ctx, sizes, sizes, w, KF_I64, KF_SUM) != 0) return 1;
  if (cudaMemcpyAsync(st->sizes.data(), sizes, 8 * w, cudaMemcpyDeviceToHost, ctx->stream) !=
          cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess)
    return 1;
  size_t total = 0;
  for (int p = 0; p < w; ++p) {
    st->sc[p] = static_cast<size_t>(n);  // the whole local tensor to every rank
    st->sd[p] = 0;
    st->rc[p] = static_cast<size_t>(st->sizes[p]);
    st->rd[p] = total;
    total += st->rc[p];
    st->sc_neg[p] = st->sc[p] * static_cast<size_t>(k);
    st->sd_neg[p] = 0;
    st->rc_neg[p] = st->rc[p] * static_cast<size_t>(k);
    st->rd_neg[p] = st->rd[p] * static_cast<size_t>(k);
  }
  if (total != static_cast<size_t>(cap)) return 1;  // T rows, by the task's shapes
  if (kf_all_to_allv(ctx, pos->data, st->sc.data(), st->sd.data(), all_pos, st->rc.data(),
                     st->rd.data(), pos->dtype) != 0)
    return 1;
  if (kf_all_to_allv(ctx, neg->data, st->sc_neg.data(), st->sd_neg.data(), all_neg,
                     st->rc_neg.data(), st->rd_neg.data(), neg->dtype) != 0)
    return 1;
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  if (pos->dtype == KF_BF16)
    return LaunchRank<__nv_bfloat16>(all_pos, all_neg, cap, k, out->data, sms, ctx->stream);
  return LaunchRank<float>(all_pos, all_neg, cap, k, out->data, sms, ctx->stream);
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  delete static_cast<State*>(ctx->user);
  ctx->user = nullptr;
  return 0;
}
