// Feature exchange fused into one remote gather: after a start barrier (every
// peer's features and ids are ready), rank r fills out chunk c straight from
// the features of rank q = (r + c) mod W, reading q's ids for q's chunk
// (W - c) mod W through the peer pointers. No gathered copy is written and
// sent: each row crosses the link once and is written once, where the
// baseline gathers into a buffer, sends it, and writes it again.
//
// A warp copies one row at a time (16-byte accesses when the row and H allow,
// element by element otherwise), so that a row's reads are coalesced whatever
// H is. No end barrier: only peers' inputs are read and only this rank's
// output is written, and no peer can pass its next start barrier before this
// rank's kernel has finished.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

struct Peers {
  const char* feats[KF_MAX_RANKS];
  const int64_t* ids[KF_MAX_RANKS];
  uint32_t* pad[KF_MAX_RANKS];
};

__device__ __forceinline__ void Barrier(const Peers& p, uint32_t* epochs, int rank, int world,
                                        uint32_t* shared_epoch) {
  if (threadIdx.x == 0) *shared_epoch = epochs[blockIdx.x] + 1;
  __syncthreads();
  const uint32_t e = *shared_epoch;
  const int peer = threadIdx.x;
  if (peer < world && peer != rank) {
    kf_signal(p.pad[peer] + blockIdx.x * world + rank, e);
    kf_wait(p.pad[rank] + blockIdx.x * world + peer, e);
  }
  __syncthreads();
  if (threadIdx.x == 0) epochs[blockIdx.x] = e;
}

template <typename V>
__device__ __forceinline__ void CopyRow(char* dst, const char* src, int64_t bytes, int lane) {
  const int64_t n = bytes / static_cast<int64_t>(sizeof(V));
  const V* s = reinterpret_cast<const V*>(src);
  V* d = reinterpret_cast<V*>(dst);
  for (int64_t k = lane; k < n; k += 32) d[k] = s[k];
}

__global__ void __launch_bounds__(kThreads)
    Exchange(Peers p, char* out, uint32_t* epochs, int rank, int world, int64_t rows_per_chunk,
             int64_t row_bytes, int vec) {
  __shared__ uint32_t epoch;
  Barrier(p, epochs, rank, world, &epoch);
  const int lane = threadIdx.x % 32;
  const int64_t total = rows_per_chunk * world;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; k < total;
       k += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int c = static_cast<int>(k / rows_per_chunk);
    const int64_t i = k - static_cast<int64_t>(c) * rows_per_chunk;
    const int q = (rank + c) % world;
    const int64_t id = p.ids[q][static_cast<int64_t>((world - c) % world) * rows_per_chunk + i];
    const char* src = p.feats[q] + id * row_bytes;
    char* dst = out + k * row_bytes;
    if (vec == 16) {
      CopyRow<uint4>(dst, src, row_bytes, lane);
    } else if (vec == 8) {
      CopyRow<uint2>(dst, src, row_bytes, lane);
    } else if (vec == 4) {
      CopyRow<uint32_t>(dst, src, row_bytes, lane);
    } else {
      CopyRow<uint16_t>(dst, src, row_bytes, lane);
    }
  }
}

struct State {
  uint32_t* epochs = nullptr;
  int blocks = 0;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int world = ctx->world_size;
  if (world < 1 || world > kThreads || ctx->num_inputs < 2 || ctx->num_outputs < 1) return 1;
  const kf_tensor& out = ctx->outputs[0];
  if (out.ndim != 2 || ctx->inputs[1].numel != out.shape[0] || out.shape[0] % world != 0)
    return 1;
  // Ranks that share one GPU must all fit on it at once (their blocks spin on
  // each other's flags), and the pad holds W slots per block.
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int blocks = ctx->emulated ? sms / (2 * world) : 2 * sms;
  const int pad_blocks = static_cast<int>(ctx->signal_pad.nbytes / (sizeof(uint32_t) * world));
  if (blocks > pad_blocks) blocks = pad_blocks;
  if (blocks < 1) return 1;
  State* st = new State;
  st->blocks = blocks;
  if (cudaMalloc(&st->epochs, sizeof(uint32_t) * blocks) != cudaSuccess ||
      cudaMemsetAsync(st->epochs, 0, sizeof(uint32_t) * blocks, ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
    cudaFree(st->epochs);
    delete st;
    return 1;
  }
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  const State* st = static_cast<const State*>(ctx->user);
  if (st == nullptr) return 1;
  const kf_tensor& feats = ctx->inputs[0];
  const kf_tensor& ids = ctx->inputs[1];
  kf_tensor& out = ctx->outputs[0];
  const int world = ctx->world_size;
  Peers p = {};
  for (int q = 0; q < world; ++q) {
    p.feats[q] = static_cast<const char*>(feats.peers[q]);
    p.ids[q] = static_cast<const int64_t*>(ids.peers[q]);
    p.pad[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
  }
  const int64_t row_bytes = out.shape[1] * static_cast<int64_t>(kf_dtype_size(out.dtype));
  // Buffers are 256-byte aligned, so every row is aligned to the largest power
  // of two (up to 16) that divides the row's bytes.
  int vec = 2;
  for (int v : {16, 8, 4}) {
    if (row_bytes % v == 0) {
      vec = v;
      break;
    }
  }
  if (row_bytes % 2 != 0) return 1;  // bf16 and f32 rows are whole 2-byte units
  Exchange<<<st->blocks, kThreads, 0, ctx->stream>>>(p, static_cast<char*>(out.data), st->epochs,
                                                     ctx->rank, world, out.shape[0] / world,
                                                     row_bytes, vec);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (cudaFree(st->epochs) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
