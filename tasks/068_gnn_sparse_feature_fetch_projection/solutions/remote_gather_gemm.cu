// Remote feature fetch by peer loads, then one cuBLAS GEMM. The table's shards are symmetric
// buffers, so after a start barrier (every peer is inside this call: its shard is in place) each
// thread copies 16-byte pieces of the rows its ids name straight from the owners' shards (through
// the peer pointers) into emb[Q, D] in the workspace, in the order of the ids; then
// out = emb @ proj_matrix with cuBLAS (fp32 accumulation, one rounding to T).
//
// Against the baseline: no partition of the ids, no count exchange, no stop of the stream to read
// the counts on the host, no id exchange, no staged rows and no unpermute pass: every fetched row
// crosses the links once and lands where the GEMM reads it.
//
// The gather treats emb as a flat array of units (16 bytes when a row is a multiple of 16 bytes,
// else 4 or 2) and keeps 4 units per thread in flight (loads first, then stores), so that enough
// remote reads are outstanding to cover the link latency whatever the row width: a 256-byte row
// (D = 128, bf16) is 16 units, a 1536-byte row (D = 768) 96.
//
// No end barrier: only peers' inputs are read and only this rank's workspace and output are
// written, and no peer can pass its next start barrier before this rank's kernels have finished.
#include <cublas_v2.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr size_t kCublasWorkspace = 32u << 20;

struct Peers {
  const char* shard[KF_MAX_RANKS];
  uint32_t* pad[KF_MAX_RANKS];
};

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
  uint32_t epoch = 0;  // calls made; every rank makes the same calls
};

// Slot [src] of rank q's pad: rank src has entered call `epoch`.
__global__ void StartBarrier(Peers p, uint32_t epoch, int rank, int world) {
  if (threadIdx.x < world && static_cast<int>(threadIdx.x) != rank) {
    kf_signal(p.pad[threadIdx.x] + rank, epoch);
    kf_wait(p.pad[rank] + threadIdx.x, epoch);
  }
}

// emb (flat, `units` units of V per row) = the rows named by ids, from their owners' shards.
template <typename V>
__global__ void __launch_bounds__(kThreads)
    Gather(Peers p, const int64_t* __restrict__ ids, int64_t n, int64_t rows, int64_t units,
           V* __restrict__ emb) {
  const int64_t total = n * units;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t base = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; base < total;
       base += stride * kUnroll) {
    V v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int64_t u = base + k * stride;
      if (u < total) {
        const int64_t q = u / units;
        const int64_t id = __ldg(ids + q);
        const int64_t owner = id / rows;
        const V* src = reinterpret_cast<const V*>(p.shard[owner]) + (id - owner * rows) * units;
        v[k] = src[u - q * units];
      }
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int64_t u = base + k * stride;
      if (u < total) emb[u] = v[k];
    }
  }
}

template <typename V>
int LaunchGather(const Peers& p, const int64_t* ids, int64_t n, int64_t rows, int64_t row_bytes,
                 void* emb, int sms, cudaStream_t s) {
  const int64_t units = row_bytes / static_cast<int64_t>(sizeof(V));
  const int64_t total = n * units;
  int64_t blocks = (total + static_cast<int64_t>(kThreads) * kUnroll - 1) /
                   (static_cast<int64_t>(kThreads) * kUnroll);
  if (blocks > 8 * static_cast<int64_t>(sms)) blocks = 8 * static_cast<int64_t>(sms);
  if (blocks < 1) blocks = 1;
  Gather<V><<<static_cast<int>(blocks), kThreads, 0, s>>>(p, ids, n, rows, units,
                                                          static_cast<V*>(emb));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size > 32) return 1;  // the barrier's one warp covers the ranks
  State* st = new State;
  ctx->user = st;
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
  const int world = ctx->world_size;
  const int64_t n = ids->numel, rows = shard->shape[0], dim = shard->shape[1];
  const int64_t odim = proj->shape[1];
  const int64_t row_bytes = dim * static_cast<int64_t>(kf_dtype_size(shard->dtype));
  if (static_cast<size_t>(n * row_bytes) > ctx->workspace.nbytes) return 1;
  void* emb = ctx->workspace.data;
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;

  Peers p = {};
  for (int q = 0; q < world; ++q) {
    p.shard[q] = static_cast<const char*>(shard->peers[q]);
    p.pad[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
  }
  st->epoch += 1;
  StartBarrier<<<1, 32, 0, ctx->stream>>>(p, st->epoch, ctx->rank, world);
  if (cudaGetLastError() != cudaSuccess) return 1;
  // Shards and the workspace are 256-byte aligned, so a row's units are aligned when the row is.
  const auto* id_ptr = static_cast<const int64_t*>(ids->data);
  int rc;
  if (row_bytes % 16 == 0)
    rc = LaunchGather<uint4>(p, id_ptr, n, rows, row_bytes, emb, sms, ctx->stream);
  else if (row_bytes % 4 == 0)
    rc = LaunchGather<uint32_t>(p, id_ptr, n, rows, row_bytes, emb, sms, ctx->stream);
  else
    rc = LaunchGather<uint16_t>(p, id_ptr, n, rows, row_bytes, emb, sms, ctx->stream);
  if (rc != 0) return 1;

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
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (st->handle != nullptr && cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  if (st->cublas_ws != nullptr && cudaFree(st->cublas_ws) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
