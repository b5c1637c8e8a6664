// Remote feature fetch + projection baseline, as PKB's reference (PyTorch) does it: the owner of
// every id (id / rows), a stable partition of the ids by owner (argsort(owner, stable=True)), an
// all-to-all of the counts, the counts to the host (.tolist()), a variable-count all-to-all of the
// ids (kf_all_to_allv: NCCL's grouped send/recv on real GPUs), the owners' local lookups, a
// variable-count all-to-all of the rows back, the rows put back in the order of the ids
// (gathered[argsort(sort_idx)]), and one cuBLAS GEMM emb @ proj_matrix (fp32 accumulation, one
// rounding to T).
#include <cublas_v2.h>
#include <stdint.h>

#include <vector>

#include "kforge/kernel.h"

namespace {

constexpr int kChunk = 1024;
constexpr int kWarps = kChunk / 32;
constexpr size_t kCublasWorkspace = 32u << 20;

// counts[c * W + d]: ids of chunk c owned by rank d; totals[d] summed over chunks.
__global__ void __launch_bounds__(kChunk)
    CountChunks(const int64_t* __restrict__ ids, int64_t n, int64_t rows, int world, int* counts,
                unsigned long long* totals) {
  __shared__ int local[KF_MAX_RANKS];
  if (threadIdx.x < world) local[threadIdx.x] = 0;
  __syncthreads();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kChunk + threadIdx.x;
  if (i < n) atomicAdd(&local[ids[i] / rows], 1);
  __syncthreads();
  if (threadIdx.x < world) {
    counts[blockIdx.x * world + threadIdx.x] = local[threadIdx.x];
    atomicAdd(totals + threadIdx.x, static_cast<unsigned long long>(local[threadIdx.x]));
  }
}

// send_ids / send_pos: the ids grouped by owner, in id order inside each group (a stable
// partition), and the position each came from.
__global__ void __launch_bounds__(kChunk)
    Partition(const int64_t* __restrict__ ids, int64_t n, int64_t rows, int world,
              const int* __restrict__ counts, int chunks, int64_t* send_ids, int64_t* send_pos) {
  __shared__ int64_t base[KF_MAX_RANKS];
  __shared__ int warp_count[kWarps][KF_MAX_RANKS];
  if (threadIdx.x < world) {
    // Everything owned by lower ranks, then this owner's ids in earlier chunks.
    const int d = threadIdx.x;
    int64_t b = 0;
    for (int c = 0; c < chunks; ++c)
      for (int e = 0; e < world; ++e)
        if (e < d || (e == d && c < static_cast<int>(blockIdx.x))) b += counts[c * world + e];
    base[d] = b;
  }
  for (int k = threadIdx.x; k < kWarps * KF_MAX_RANKS; k += kChunk) (&warp_count[0][0])[k] = 0;
  __syncthreads();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kChunk + threadIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int dest = i < n ? static_cast<int>(ids[i] / rows) : -1;
  const unsigned same = __match_any_sync(0xffffffffu, dest);
  const int before_in_warp = __popc(same & ((1u << lane) - 1));
  if (dest >= 0 && before_in_warp == 0) warp_count[warp][dest] = __popc(same);
  __syncthreads();
  if (dest >= 0) {
    int64_t p = base[dest] + before_in_warp;
    for (int w = 0; w < warp; ++w) p += warp_count[w][dest];
    send_ids[p] = ids[i];
    send_pos[p] = i;
  }
}

// out[k] = shard[ids[k] - first]: rows of `row_bytes` (a whole number of 2-byte units), a warp per
// row.
__global__ void LocalLookup(const char* __restrict__ shard, const int64_t* __restrict__ ids,
                            int64_t count, int64_t first, int64_t row_bytes, char* out) {
  const int lane = threadIdx.x % 32;
  for (int64_t k = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; k < count;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x / 32) {
    const uint16_t* s = reinterpret_cast<const uint16_t*>(shard + (ids[k] - first) * row_bytes);
    uint16_t* d = reinterpret_cast<uint16_t*>(out + k * row_bytes);
    for (int64_t j = lane; j < row_bytes / 2; j += 32) d[j] = s[j];
  }
}

// out[pos[j]] = grouped[j]: the rows back in the order of the ids.
__global__ void Unpermute(const char* __restrict__ grouped, const int64_t* __restrict__ pos,
                          int64_t n, int64_t row_bytes, char* out) {
  const int lane = threadIdx.x % 32;
  for (int64_t j = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x / 32) {
    const uint16_t* s = reinterpret_cast<const uint16_t*>(grouped + j * row_bytes);
    uint16_t* d = reinterpret_cast<uint16_t*>(out + pos[j] * row_bytes);
    for (int64_t k = lane; k < row_bytes / 2; k += 32) d[k] = s[k];
  }
}

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
  std::vector<unsigned long long> send_counts, recv_counts;
  std::vector<size_t> sc, sd, rc, rd, sc_rows, sd_rows, rc_rows, rd_rows;
};

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int w = ctx->world_size;
  State* st = new State;
  ctx->user = st;
  st->send_counts.resize(w);
  st->recv_counts.resize(w);
  for (auto* v :
       {&st->sc, &st->sd, &st->rc, &st->rd, &st->sc_rows, &st->sd_rows, &st->rc_rows, &st->rd_rows})
    v->resize(w);
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor* shard = kf_input(ctx, "local_embedding_shard");
  const kf_tensor* ids = kf_input(ctx, "input_node_ids");
  const kf_tensor* proj = kf_input(ctx, "proj_matrix");
  kf_tensor* out = kf_output(ctx, "out");
  if (st == nullptr || shard == nullptr || ids == nullptr || proj == nullptr || out == nullptr)
    return 1;
  if (shard->dtype != KF_BF16 && shard->dtype != KF_F32) return 2;
  const int w = ctx->world_size;
  const int64_t n = ids->numel, rows = shard->shape[0], dim = shard->shape[1];
  const int64_t odim = proj->shape[1];
  const size_t elem = kf_dtype_size(shard->dtype);
  const int64_t row_bytes = dim * static_cast<int64_t>(elem);
  const int chunks = static_cast<int>((n + kChunk - 1) / kChunk);
  // totals | received totals | chunk counts | send ids | send positions | received ids |
  // looked-up rows | rows back in owner order | rows in id order (the GEMM's A).
  char* ws = static_cast<char*>(ctx->workspace.data);
  auto* totals = reinterpret_cast<unsigned long long*>(ws);
  auto* recv_totals = reinterpret_cast<unsigned long long*>(ws + Align(8 * w));
  char* at = ws + 2 * Align(8 * w);
  int* counts = reinterpret_cast<int*>(at);
  at += Align(4 * static_cast<size_t>(chunks) * w);
  auto* send_ids = reinterpret_cast<int64_t*>(at);
  at += Align(8 * n);
  auto* send_pos = reinterpret_cast<int64_t*>(at);
  at += Align(8 * n);
  auto* recv_ids = reinterpret_cast<int64_t*>(at);
  at += Align(8 * n * w);
  char* looked_up = at;
  at += Align(static_cast<size_t>(n * w * row_bytes));
  char* grouped = at;
  at += Align(static_cast<size_t>(n * row_bytes));
  char* emb = at;
  at += Align(static_cast<size_t>(n * row_bytes));
  if (at > ws + ctx->workspace.nbytes) return 1;
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;

  if (cudaMemsetAsync(totals, 0, 8 * w, ctx->stream) != cudaSuccess) return 1;
  CountChunks<<<chunks, kChunk, 0, ctx->stream>>>(static_cast<const int64_t*>(ids->data), n, rows,
                                                  w, counts, totals);
  Partition<<<chunks, kChunk, 0, ctx->stream>>>(static_cast<const int64_t*>(ids->data), n, rows, w,
                                                counts, chunks, send_ids, send_pos);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_to_all(ctx, totals, recv_totals, 1, KF_I64) != 0) return 1;
  if (cudaMemcpyAsync(st->send_counts.data(), totals, 8 * w, cudaMemcpyDeviceToHost, ctx->stream) !=
          cudaSuccess ||
      cudaMemcpyAsync(st->recv_counts.data(), recv_totals, 8 * w, cudaMemcpyDeviceToHost,
                      ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess)
    return 1;
  size_t sent = 0, got = 0;
  for (int p = 0; p < w; ++p) {
    st->sc[p] = st->send_counts[p];
    st->rc[p] = st->recv_counts[p];
    st->sd[p] = sent;
    st->rd[p] = got;
    sent += st->sc[p];
    got += st->rc[p];
    st->sc_rows[p] = st->sc[p] * static_cast<size_t>(dim);
    st->sd_rows[p] = st->sd[p] * static_cast<size_t>(dim);
    st->rc_rows[p] = st->rc[p] * static_cast<size_t>(dim);
    st->rd_rows[p] = st->rd[p] * static_cast<size_t>(dim);
  }
  if (got > static_cast<size_t>(n * w)) return 1;
  // Ids out, rows back: the row exchange's counts are the id exchange's, reversed.
  if (kf_all_to_allv(ctx, send_ids, st->sc.data(), st->sd.data(), recv_ids, st->rc.data(),
                     st->rd.data(), KF_I64) != 0)
    return 1;
  if (got > 0) {
    LocalLookup<<<4 * sms, 256, 0, ctx->stream>>>(static_cast<const char*>(shard->data), recv_ids,
                                                  static_cast<int64_t>(got), ctx->rank * rows,
                                                  row_bytes, looked_up);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  if (kf_all_to_allv(ctx, looked_up, st->rc_rows.data(), st->rd_rows.data(), grouped,
                     st->sc_rows.data(), st->sd_rows.data(), shard->dtype) != 0)
    return 1;
  Unpermute<<<4 * sms, 256, 0, ctx->stream>>>(grouped, send_pos, n, row_bytes, emb);
  if (cudaGetLastError() != cudaSuccess) return 1;

  // Row-major out[Q, O] = emb[Q, D] @ proj[D, O] is column-major out^T[O, Q] = proj^T emb^T, where
  // the row-major proj is column-major [O, D] (lda = O) and the row-major emb column-major [D, Q].
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t t = shard->dtype == KF_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  if (cublasGemmEx(st->handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(odim),
                   static_cast<int>(n), static_cast<int>(dim), &alpha, proj->data, t,
                   static_cast<int>(odim), emb, t, static_cast<int>(dim), &beta, out->data, t,
                   static_cast<int>(odim), CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
    return 1;
  return 0;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = 0;
  if (st->handle != nullptr && cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  if (st->cublas_ws != nullptr && cudaFree(st->cublas_ws) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
