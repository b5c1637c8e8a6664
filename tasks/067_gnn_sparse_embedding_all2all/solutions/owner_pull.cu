// Sparse embedding exchange by pulling: after a start barrier (every peer's
// ids and rows are ready), rank r reads every peer's ids through the peer
// pointers, counts per 1024-id chunk how many it owns (id mod W == r), and
// copies its own pairs straight from the peers' rows into its outputs at the
// place the counts give: grouped by source rank, in source order. No send
// buffers, no count exchange, no host round trip (the baseline stops the
// stream to read the counts on the host, as PyTorch's .tolist() does).
//
// Two kernels over (source, chunk) blocks: one counts, one places. A chunk's
// ids find their place among this rank's ids of their warp
// (__ballot_sync), then of earlier warps, then of earlier chunks and sources.
// No end barrier: only peers' inputs are read and only this rank's outputs
// are written, and no peer can pass its next start barrier before this rank's
// kernels have finished.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kChunk = 1024;
constexpr int kWarps = kChunk / 32;

struct Peers {
  const int64_t* idx[KF_MAX_RANKS];
  const char* value[KF_MAX_RANKS];
  uint32_t* pad[KF_MAX_RANKS];
};

__global__ void StartBarrier(Peers p, uint32_t* epoch, int rank, int world) {
  const uint32_t e = *epoch + 1;
  const int peer = threadIdx.x;
  if (peer < world && peer != rank) {
    kf_signal(p.pad[peer] + rank, e);
    kf_wait(p.pad[rank] + peer, e);
  }
  __syncthreads();
  if (threadIdx.x == 0) *epoch = e;
}

// Block (chunk c, source p): counts[p * chunks + c] = ids of that chunk this rank owns.
__global__ void __launch_bounds__(kChunk)
    Count(Peers p, int64_t n, int rank, int world, int chunks, int* counts) {
  __shared__ int warp_sum[kWarps];
  const int src = blockIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kChunk + threadIdx.x;
  const bool mine = i < n && p.idx[src][i] % world == rank;
  const unsigned m = __ballot_sync(0xffffffffu, mine);
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = __popc(m);
  __syncthreads();
  if (threadIdx.x == 0) {
    int s = 0;
    for (int w = 0; w < kWarps; ++w) s += warp_sum[w];
    counts[src * chunks + blockIdx.x] = s;
  }
}

__global__ void __launch_bounds__(kChunk)
    Place(Peers p, int64_t n, int64_t row_bytes, int rank, int world, int chunks,
          const int* __restrict__ counts, int64_t* out_idx, char* out_value, int64_t* out_count) {
  __shared__ int warp_sum[kWarps];
  __shared__ int64_t base;
  __shared__ int64_t place[kChunk];
  __shared__ int64_t from[kChunk];
  __shared__ int mine_here;
  const int src = blockIdx.y;
  const int own = src * chunks + static_cast<int>(blockIdx.x);
  if (threadIdx.x == 0) {
    int64_t b = 0;
    for (int k = 0; k < own; ++k) b += counts[k];
    base = b;
    if (own == world * chunks - 1) *out_count = b + counts[own];  // the last block knows the total
  }
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kChunk + threadIdx.x;
  const int64_t id = i < n ? p.idx[src][i] : -1;
  const bool mine = id >= 0 && id % world == rank;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned m = __ballot_sync(0xffffffffu, mine);
  if (lane == 0) warp_sum[warp] = __popc(m);
  __syncthreads();
  if (mine) {
    int before = __popc(m & ((1u << lane) - 1));
    for (int w = 0; w < warp; ++w) before += warp_sum[w];
    place[before] = base + before;
    from[before] = i;
    out_idx[base + before] = id;
  }
  if (threadIdx.x == 0) {
    int s = 0;
    for (int w = 0; w < kWarps; ++w) s += warp_sum[w];
    mine_here = s;
  }
  __syncthreads();
  // Rows: a warp per row, 16-byte accesses when rows are 16-byte multiples.
  for (int e = warp; e < mine_here; e += kWarps) {
    const char* s = p.value[src] + from[e] * row_bytes;
    char* d = out_value + place[e] * row_bytes;
    if (row_bytes % 16 == 0) {
      for (int64_t j = lane; j < row_bytes / 16; j += 32)
        reinterpret_cast<uint4*>(d)[j] = reinterpret_cast<const uint4*>(s)[j];
    } else {
      for (int64_t j = lane; j < row_bytes / 2; j += 32)
        reinterpret_cast<uint16_t*>(d)[j] = reinterpret_cast<const uint16_t*>(s)[j];
    }
  }
}

struct State {
  uint32_t* epoch = nullptr;
  int* counts = nullptr;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const kf_tensor& idx = ctx->inputs[0];
  const int world = ctx->world_size;
  if (world < 1 || world > 32 || ctx->num_outputs < 3) return 1;
  const int64_t chunks = (idx.numel + kChunk - 1) / kChunk;
  State* st = new State;
  if (cudaMalloc(&st->epoch, sizeof(uint32_t)) != cudaSuccess ||
      cudaMalloc(&st->counts, sizeof(int) * (chunks * world > 0 ? chunks * world : 1)) !=
          cudaSuccess ||
      cudaMemsetAsync(st->epoch, 0, sizeof(uint32_t), ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
    cudaFree(st->epoch);
    cudaFree(st->counts);
    delete st;
    return 1;
  }
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 1;
  const kf_tensor& idx = ctx->inputs[0];
  const kf_tensor& value = ctx->inputs[1];
  const int world = ctx->world_size, rank = ctx->rank;
  const int64_t n = idx.numel;
  const int64_t row_bytes = value.shape[1] * static_cast<int64_t>(kf_dtype_size(value.dtype));
  Peers p = {};
  for (int q = 0; q < world; ++q) {
    p.idx[q] = static_cast<const int64_t*>(idx.peers[q]);
    p.value[q] = static_cast<const char*>(value.peers[q]);
    p.pad[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
  }
  StartBarrier<<<1, 32, 0, ctx->stream>>>(p, st->epoch, rank, world);
  const int chunks = static_cast<int>((n + kChunk - 1) / kChunk);
  const dim3 grid(chunks, world);
  Count<<<grid, kChunk, 0, ctx->stream>>>(p, n, rank, world, chunks, st->counts);
  Place<<<grid, kChunk, 0, ctx->stream>>>(p, n, row_bytes, rank, world, chunks, st->counts,
                                          static_cast<int64_t*>(ctx->outputs[0].data),
                                          static_cast<char*>(ctx->outputs[1].data),
                                          static_cast<int64_t*>(ctx->outputs[2].data));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (cudaFree(st->epoch) != cudaSuccess || cudaFree(st->counts) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
