// KJT all-to-all baseline, as TorchRec's KJTAllToAll does it (PKB's reference):
//   1. the ids of every feature (the KJT's length_per_key: one block per feature sums its
//      lengths), the split metadata per peer d from them, [lengths to d, ids to d, batch size],
//      and one all-to-all of the metadata;
//   2. the splits to the host (TorchRec's .tolist(): the stream stops here);
//   3. two variable-count all-to-alls through kf_all_to_allv (NCCL's grouped send/recv), of the
//      lengths and of the ids, straight from the inputs: the features are in rank order, so
//      what goes to rank d is one contiguous range of each;
//   4. the recat (fbgemm's permute_1D_sparse_data with batch_size_per_rank): what arrived is
//      ordered (source rank, feature, sample); the outputs are (feature, source rank, sample).
//      A first kernel sums the ids of every (source, feature) segment, a second places the
//      segments, each block finding its segment's offsets from those sums;
//   5. the strides and counts, known on the host after step 2.
#include <stdint.h>

#include <vector>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

// Table-wise key splits (task.toml): rank d owns count[d] features from offset[d] on.
struct Split {
  int64_t count[KF_MAX_RANKS];
  int64_t offset[KF_MAX_RANKS + 1];
};

Split MakeSplit(int world, int64_t nf, int64_t u) {
  Split s = {};
  for (int d = 0; d < world; ++d) {
    s.count[d] = nf / world + (d < nf % world ? 1 : 0) + u * (d % 3);
    s.offset[d + 1] = s.offset[d] + s.count[d];
  }
  return s;
}

// What this rank received from each source s: its batch, and where its lengths and ids start.
struct Received {
  int64_t batch[KF_MAX_RANKS];
  int64_t lengths_at[KF_MAX_RANKS];
  int64_t values_at[KF_MAX_RANKS];
};

__device__ int64_t BlockSum(int64_t v) {
  __shared__ int64_t partial[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  int64_t s = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kThreads / 32; ++w) s += partial[w];
  return s;  // valid in thread 0
}

// Block f: per_key[f] = the ids of feature f (the sum of its b lengths).
__global__ void __launch_bounds__(kThreads)
    LengthPerKey(const int64_t* __restrict__ lengths, const int64_t* __restrict__ batch_size,
                 int64_t* per_key) {
  const int f = blockIdx.x;
  const int64_t b = *batch_size;
  int64_t v = 0;
  for (int64_t i = threadIdx.x; i < b; i += kThreads) v += lengths[f * b + i];
  v = BlockSum(v);
  if (threadIdx.x == 0) per_key[f] = v;
}

// Thread d: meta[d * 3 + {0, 1, 2}] = {lengths to rank d, ids to rank d, this rank's batch}.
__global__ void SendSplits(const int64_t* __restrict__ per_key,
                           const int64_t* __restrict__ batch_size, Split split, int world,
                           int64_t* meta) {
  const int d = threadIdx.x;
  if (d >= world) return;
  const int64_t b = *batch_size;
  int64_t v = 0;
  for (int64_t f = split.offset[d]; f < split.offset[d + 1]; ++f) v += per_key[f];
  meta[d * 3 + 0] = split.count[d] * b;
  meta[d * 3 + 1] = v;
  meta[d * 3 + 2] = b;
}

// Block (k, s): seg[s * local + k] = the ids of local feature k that came from rank s.
__global__ void __launch_bounds__(kThreads)
    SegmentIds(const int64_t* __restrict__ recv_lengths, Received rv, int local, int64_t* seg) {
  const int k = blockIdx.x, s = blockIdx.y;
  const int64_t b = rv.batch[s];
  const int64_t* l = recv_lengths + rv.lengths_at[s] + k * b;
  int64_t v = 0;
  for (int64_t i = threadIdx.x; i < b; i += kThreads) v += l[i];
  v = BlockSum(v);
  if (threadIdx.x == 0) seg[s * local + k] = v;
}

// Block (c, j), j = k * world + s: output segment j (local feature k from rank s), part c.
__global__ void __launch_bounds__(kThreads)
    Recat(const int64_t* __restrict__ recv_lengths, const int64_t* __restrict__ recv_values,
          const int64_t* __restrict__ seg, Received rv, int world, int local, int64_t stride,
          int64_t* out_lengths, int64_t* out_values) {
  __shared__ int64_t out_at, from, n;
  const int j = blockIdx.y, k = j / world, s = j % world;
  if (threadIdx.x == 0) {
    int64_t o = 0, f = rv.values_at[s];
    for (int jj = 0; jj < j; ++jj) o += seg[(jj % world) * local + jj / world];
    for (int kk = 0; kk < k; ++kk) f += seg[s * local + kk];
    out_at = o;
    from = f;
    n = seg[s * local + k];
  }
  __syncthreads();
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  for (int64_t i = first; i < n; i += step) out_values[out_at + i] = recv_values[from + i];
  // The lengths: b_s of them, after those of earlier features and of earlier ranks.
  int64_t lo = k * stride;
  for (int ss = 0; ss < s; ++ss) lo += rv.batch[ss];
  const int64_t* src = recv_lengths + rv.lengths_at[s] + k * rv.batch[s];
  for (int64_t i = first; i < rv.batch[s]; i += step) out_lengths[lo + i] = src[i];
}

struct Scalars {
  int64_t batch[KF_MAX_RANKS];
  int64_t stride, lengths_count, values_count;
};

__global__ void WriteScalars(Scalars v, int world, int64_t* stride, int64_t* per_rank,
                             int64_t* lengths_count, int64_t* values_count) {
  const int s = threadIdx.x;
  if (s < world) per_rank[s] = v.batch[s];
  if (s == 0) {
    *stride = v.stride;
    *lengths_count = v.lengths_count;
    *values_count = v.values_count;
  }
}

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

struct State {
  std::vector<int64_t> send_meta, recv_meta;
  std::vector<size_t> lc_send, ld_send, vc_send, vd_send, lc_recv, ld_recv, vc_recv, vd_recv;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int w = ctx->world_size;
  if (w < 1 || w > KF_MAX_RANKS) return 1;
  State* st = new State;
  st->send_meta.resize(3 * w);
  st->recv_meta.resize(3 * w);
  for (auto* v : {&st->lc_send, &st->ld_send, &st->vc_send, &st->vd_send, &st->lc_recv,
                  &st->ld_recv, &st->vc_recv, &st->vd_recv})
    v->resize(w);
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor* lengths = kf_input(ctx, "lengths");
  const kf_tensor* values = kf_input(ctx, "values");
  const kf_tensor* batch_size = kf_input(ctx, "batch_size");
  kf_tensor* out_lengths = kf_output(ctx, "recv_lengths");
  kf_tensor* out_values = kf_output(ctx, "recv_values");
  kf_tensor* stride_out = kf_output(ctx, "stride");
  kf_tensor* per_rank_out = kf_output(ctx, "stride_per_rank");
  kf_tensor* lengths_count = kf_output(ctx, "lengths_count");
  kf_tensor* values_count = kf_output(ctx, "values_count");
  if (st == nullptr || !lengths || !values || !batch_size || !out_lengths || !out_values ||
      !stride_out || !per_rank_out || !lengths_count || !values_count)
    return 1;
  const int w = ctx->world_size, rank = ctx->rank;
  const Split split = MakeSplit(w, static_cast<int64_t>(kf_param(ctx, "nf", -1)),
                                static_cast<int64_t>(kf_param(ctx, "u", -1)));
  const int local = static_cast<int>(split.count[rank]);
  const int features = static_cast<int>(split.offset[w]);
  if (features < 1) return 1;

  // Workspace: ids per feature | sent splits | received splits | segment ids | received
  // lengths | received ids.
  char* ws = static_cast<char*>(ctx->workspace.data);
  auto* per_key = reinterpret_cast<int64_t*>(ws);
  ws += Align(8 * features);
  auto* send_meta = reinterpret_cast<int64_t*>(ws);
  auto* recv_meta = reinterpret_cast<int64_t*>(ws + Align(24 * w));
  auto* seg = reinterpret_cast<int64_t*>(ws + 2 * Align(24 * w));
  auto* recv_lengths = reinterpret_cast<int64_t*>(ws + 2 * Align(24 * w) + Align(8 * w * local));
  auto* recv_values = recv_lengths + Align(8 * out_lengths->numel) / 8;
  if (reinterpret_cast<char*>(recv_values + out_values->numel) >
      static_cast<char*>(ctx->workspace.data) + ctx->workspace.nbytes)
    return 1;

  const int64_t* batch = static_cast<const int64_t*>(batch_size->data);
  LengthPerKey<<<features, kThreads, 0, ctx->stream>>>(static_cast<const int64_t*>(lengths->data),
                                                       batch, per_key);
  SendSplits<<<1, 32, 0, ctx->stream>>>(per_key, batch, split, w, send_meta);
  if (kf_all_to_all(ctx, send_meta, recv_meta, 3, KF_I64) != 0) return 1;
  if (cudaMemcpyAsync(st->send_meta.data(), send_meta, 24 * w, cudaMemcpyDeviceToHost,
                      ctx->stream) != cudaSuccess ||
      cudaMemcpyAsync(st->recv_meta.data(), recv_meta, 24 * w, cudaMemcpyDeviceToHost,
                      ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess)
    return 1;

  Received rv = {};
  Scalars sc = {};
  size_t ls = 0, vs = 0, lr = 0, vr = 0;
  for (int p = 0; p < w; ++p) {
    st->lc_send[p] = static_cast<size_t>(st->send_meta[3 * p + 0]);
    st->vc_send[p] = static_cast<size_t>(st->send_meta[3 * p + 1]);
    st->lc_recv[p] = static_cast<size_t>(st->recv_meta[3 * p + 0]);
    st->vc_recv[p] = static_cast<size_t>(st->recv_meta[3 * p + 1]);
    st->ld_send[p] = ls;
    st->vd_send[p] = vs;
    st->ld_recv[p] = lr;
    st->vd_recv[p] = vr;
    ls += st->lc_send[p];
    vs += st->vc_send[p];
    lr += st->lc_recv[p];
    vr += st->vc_recv[p];
    rv.batch[p] = sc.batch[p] = st->recv_meta[3 * p + 2];
    rv.lengths_at[p] = static_cast<int64_t>(st->ld_recv[p]);
    rv.values_at[p] = static_cast<int64_t>(st->vd_recv[p]);
    sc.stride += rv.batch[p];
  }
  if (lr > static_cast<size_t>(out_lengths->numel) || vr > static_cast<size_t>(out_values->numel) ||
      vs > static_cast<size_t>(values->numel))
    return 1;
  if (kf_all_to_allv(ctx, lengths->data, st->lc_send.data(), st->ld_send.data(), recv_lengths,
                     st->lc_recv.data(), st->ld_recv.data(), KF_I64) != 0)
    return 1;
  if (kf_all_to_allv(ctx, values->data, st->vc_send.data(), st->vd_send.data(), recv_values,
                     st->vc_recv.data(), st->vd_recv.data(), KF_I64) != 0)
    return 1;

  if (local > 0) {
    SegmentIds<<<dim3(local, w), kThreads, 0, ctx->stream>>>(recv_lengths, rv, local, seg);
    // Enough blocks per segment for an average segment of ids (segments differ little).
    const int64_t per_segment = static_cast<int64_t>(vr) / (static_cast<int64_t>(local) * w);
    int64_t parts = (per_segment + 8 * kThreads - 1) / (8 * kThreads);
    parts = parts < 1 ? 1 : (parts > 1024 ? 1024 : parts);
    Recat<<<dim3(static_cast<unsigned>(parts), local * w), kThreads, 0, ctx->stream>>>(
        recv_lengths, recv_values, seg, rv, w, local, sc.stride,
        static_cast<int64_t*>(out_lengths->data), static_cast<int64_t*>(out_values->data));
  }
  sc.lengths_count = static_cast<int64_t>(lr);
  sc.values_count = static_cast<int64_t>(vr);
  WriteScalars<<<1, 32, 0, ctx->stream>>>(
      sc, w, static_cast<int64_t*>(stride_out->data), static_cast<int64_t*>(per_rank_out->data),
      static_cast<int64_t*>(lengths_count->data), static_cast<int64_t*>(values_count->data));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  delete static_cast<State*>(ctx->user);
  ctx->user = nullptr;
  return 0;
}
