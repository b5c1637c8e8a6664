// Sparse embedding exchange baseline, as PyTorch code does it: count the pairs
// per owner (id mod W), partition them stably by owner into send buffers, an
// all-to-all of the counts, the counts to the host (.tolist()), then two
// variable-count all-to-alls (ids, rows) through kf_all_to_allv (NCCL's
// grouped send/recv on real GPUs) straight into the outputs.
//
// The partition is one pass of 1024-element chunks: a chunk's elements find
// their place among same-owner elements of their warp (__match_any_sync),
// then of earlier warps, then of earlier chunks (per-chunk counts from a
// first pass), so the order inside every owner's group is the input order.
#include <stdint.h>

#include <vector>

#include "kforge/kernel.h"

namespace {

constexpr int kChunk = 1024;  // elements per block, one per thread
constexpr int kWarps = kChunk / 32;

// counts[c * W + d]: elements of chunk c owned by rank d; totals[d] summed.
__global__ void __launch_bounds__(kChunk)
    CountChunks(const int64_t* __restrict__ idx, int64_t n, int world, int* counts,
                unsigned long long* totals) {
  __shared__ int local[KF_MAX_RANKS];
  if (threadIdx.x < world) local[threadIdx.x] = 0;
  __syncthreads();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kChunk + threadIdx.x;
  if (i < n) atomicAdd(&local[idx[i] % world], 1);
  __syncthreads();
  if (threadIdx.x < world) {
    counts[blockIdx.x * world + threadIdx.x] = local[threadIdx.x];
    atomicAdd(totals + threadIdx.x, static_cast<unsigned long long>(local[threadIdx.x]));
  }
}

// Writes each pair at its place in the owner-partitioned send buffers.
template <typename T>
__global__ void __launch_bounds__(kChunk)
    Partition(const int64_t* __restrict__ idx, const T* __restrict__ value, int64_t n,
              int64_t hidden, int world, const int* __restrict__ counts, int chunks,
              int64_t* send_idx, T* send_value) {
  __shared__ int64_t base[KF_MAX_RANKS];
  __shared__ int warp_count[kWarps][KF_MAX_RANKS];
  __shared__ int64_t place[kChunk];
  if (threadIdx.x < world) {
    // Everything owned by lower ranks, then this owner's elements in earlier chunks.
    const int d = threadIdx.x;
    int64_t b = 0;
    for (int c = 0; c < chunks; ++c) {
      for (int e = 0; e < world; ++e) {
        if (e < d || (e == d && c < static_cast<int>(blockIdx.x))) b += counts[c * world + e];
      }
    }
    base[d] = b;
  }
  for (int k = threadIdx.x; k < kWarps * KF_MAX_RANKS; k += kChunk) (&warp_count[0][0])[k] = 0;
  __syncthreads();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kChunk + threadIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int dest = i < n ? static_cast<int>(idx[i] % world) : -1;
  const unsigned same = __match_any_sync(0xffffffffu, dest);
  const int before_in_warp = __popc(same & ((1u << lane) - 1));
  if (dest >= 0 && before_in_warp == 0) warp_count[warp][dest] = __popc(same);
  __syncthreads();
  if (dest >= 0) {
    int64_t p = base[dest] + before_in_warp;
    for (int w = 0; w < warp; ++w) p += warp_count[w][dest];
    place[threadIdx.x] = p;
    send_idx[p] = idx[i];
  }
  __syncthreads();
  // Rows: a warp per row, so that each row's reads and writes are coalesced.
  const int64_t in_chunk = n - static_cast<int64_t>(blockIdx.x) * kChunk;
  const int rows = static_cast<int>(in_chunk < kChunk ? in_chunk : kChunk);
  for (int e = warp; e < rows; e += kWarps) {
    const T* src = value + (static_cast<int64_t>(blockIdx.x) * kChunk + e) * hidden;
    T* dst = send_value + place[e] * hidden;
    for (int64_t j = lane; j < hidden; j += 32) dst[j] = src[j];
  }
}

__global__ void WriteCount(int64_t* out, int64_t value) { *out = value; }

struct State {
  std::vector<unsigned long long> send_counts, recv_counts;
  std::vector<size_t> sc, sd, rc, rd, sc_rows, sd_rows, rc_rows, rd_rows;
};

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int w = ctx->world_size;
  State* st = new State;
  st->send_counts.resize(w);
  st->recv_counts.resize(w);
  for (auto* v :
       {&st->sc, &st->sd, &st->rc, &st->rd, &st->sc_rows, &st->sd_rows, &st->rc_rows, &st->rd_rows})
    v->resize(w);
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor& idx = ctx->inputs[0];
  const kf_tensor& value = ctx->inputs[1];
  kf_tensor& recv_idx = ctx->outputs[0];
  kf_tensor& recv_value = ctx->outputs[1];
  kf_tensor& recv_count = ctx->outputs[2];
  const int w = ctx->world_size;
  const int64_t n = idx.numel, hidden = value.shape[1];
  const size_t elem = kf_dtype_size(value.dtype);
  const int chunks = static_cast<int>((n + kChunk - 1) / kChunk);

  // Workspace: totals | received totals | per-chunk counts | send ids | send rows.
  char* ws = static_cast<char*>(ctx->workspace.data);
  auto* totals = reinterpret_cast<unsigned long long*>(ws);
  auto* recv_totals = reinterpret_cast<unsigned long long*>(ws + Align(8 * w));
  int* counts = reinterpret_cast<int*>(ws + 2 * Align(8 * w));
  auto* send_idx = reinterpret_cast<int64_t*>(ws + 2 * Align(8 * w) + Align(4 * chunks * w));
  char* send_value = reinterpret_cast<char*>(send_idx) + Align(8 * n);
  if (send_value + n * hidden * elem > ws + ctx->workspace.nbytes) return 1;

  if (cudaMemsetAsync(totals, 0, 8 * w, ctx->stream) != cudaSuccess) return 1;
  if (n > 0) {
    CountChunks<<<chunks, kChunk, 0, ctx->stream>>>(static_cast<const int64_t*>(idx.data), n, w,
                                                    counts, totals);
    if (elem == 2) {
      Partition<<<chunks, kChunk, 0, ctx->stream>>>(
          static_cast<const int64_t*>(idx.data), static_cast<const uint16_t*>(value.data), n,
          hidden, w, counts, chunks, send_idx, reinterpret_cast<uint16_t*>(send_value));
    } else {
      Partition<<<chunks, kChunk, 0, ctx->stream>>>(
          static_cast<const int64_t*>(idx.data), static_cast<const uint32_t*>(value.data), n,
          hidden, w, counts, chunks, send_idx, reinterpret_cast<uint32_t*>(send_value));
    }
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
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
    st->sc_rows[p] = st->sc[p] * hidden;
    st->sd_rows[p] = st->sd[p] * hidden;
    st->rc_rows[p] = st->rc[p] * hidden;
    st->rd_rows[p] = st->rd[p] * hidden;
  }
  if (got > static_cast<size_t>(recv_idx.numel)) return 1;
  if (kf_all_to_allv(ctx, send_idx, st->sc.data(), st->sd.data(), recv_idx.data, st->rc.data(),
                     st->rd.data(), KF_I64) != 0)
    return 1;
  if (kf_all_to_allv(ctx, send_value, st->sc_rows.data(), st->sd_rows.data(), recv_value.data,
                     st->rc_rows.data(), st->rd_rows.data(), value.dtype) != 0)
    return 1;
  WriteCount<<<1, 1, 0, ctx->stream>>>(static_cast<int64_t*>(recv_count.data),
                                       static_cast<int64_t>(got));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  delete static_cast<State*>(ctx->user);
  ctx->user = nullptr;
  return 0;
}
