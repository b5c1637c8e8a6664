// Column-parallel GEMM + all-gather with the gather of one row chunk overlapped with the GEMM of
// the next.
//
//   main stream:  GEMM rows 0 | GEMM rows 1 | GEMM rows 2 | ...
//   side stream:              | push rows 0 | push rows 1 | ... | end barrier
//
// The GEMM writes this rank's block a @ b straight into its own c, at columns rank*N..rank*N+N (a
// leading dimension of W*N does the concatenation, so there is no gathered copy to re-lay). As soon
// as a chunk of rows is there, a kernel on the side stream stores it into the same place in every
// peer's c (peer stores), while the tensor cores compute the next chunk.
//
// Ordering: before its first store into peer q's c, every push block waits for flag [kStart + q] of
// this call (q has entered the call, after the harness reset its output); the flag is raised from
// the side stream, which starts behind everything already on ctx->stream. The end barrier (flag
// [kDone + src]) keeps every rank in the call until all peers have finished writing its c. Epochs
// grow by one per call (every rank makes the same calls).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kMaxWorld = 8;
constexpr int kMaxChunks = 8;
constexpr int kThreads = 256;
constexpr int kStart = 0;         // pad slots [kStart + src]
constexpr int kDone = kMaxWorld;  // pad slots [kDone + src]
constexpr size_t kCublasWorkspace = 32u << 20;

struct Ptrs {
  char* p[kMaxWorld];
};
struct Pads {
  uint32_t* p[kMaxWorld];
};

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  cudaEvent_t ready[kMaxChunks] = {};
  uint32_t epoch = 0;
  int blocks = 1;
};

// Copies rows [r0, r1) of this rank's column block (bytes [col0, col0 + width) of each c row of
// `pitch` bytes) from its own c into every peer's c. Every block raises and waits for the start
// flags itself (idempotent), so no block depends on another being resident.
__global__ void __launch_bounds__(kThreads)
    Push(Ptrs out, Pads pads, int rank, int world, uint32_t epoch, int64_t r0, int64_t r1,
         int64_t pitch, int64_t col0, int64_t width, bool vec) {
  if (threadIdx.x < world) {
    kf_signal(pads.p[threadIdx.x] + kStart + rank, epoch);
    kf_wait(pads.p[rank] + kStart + threadIdx.x, epoch);
  }
  __syncthreads();
  const char* src = out.p[rank];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (vec) {
    const int64_t per_row = width / 16;
    const int64_t units = (r1 - r0) * per_row;
    for (int64_t u = first; u < units; u += stride) {
      const int64_t off = (r0 + u / per_row) * pitch + col0 + (u % per_row) * 16;
      const uint4 v = *reinterpret_cast<const uint4*>(src + off);
      for (int q = 0; q < world; ++q)
        if (q != rank) *reinterpret_cast<uint4*>(out.p[q] + off) = v;
    }
  } else {
    const int64_t units = (r1 - r0) * width;
    for (int64_t u = first; u < units; u += stride) {
      const int64_t off = (r0 + u / width) * pitch + col0 + u % width;
      const char v = src[off];
      for (int q = 0; q < world; ++q)
        if (q != rank) out.p[q][off] = v;
    }
  }
}

__global__ void EndBarrier(Pads pads, int rank, int world, uint32_t epoch) {
  const int q = threadIdx.x;
  if (q < world) {
    __threadfence_system();
    kf_signal(pads.p[q] + kDone + rank, epoch);
    kf_wait(pads.p[rank] + kDone + q, epoch);
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size > kMaxWorld) return 1;
  if (ctx->signal_pad.nbytes < sizeof(uint32_t) * 2 * kMaxWorld) return 1;
  State* st = new State;
  ctx->user = st;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    return 1;
  if (cudaStreamCreateWithFlags(&st->side, cudaStreamNonBlocking) != cudaSuccess) return 1;
  if (cudaEventCreateWithFlags(&st->fork, cudaEventDisableTiming) != cudaSuccess) return 1;
  if (cudaEventCreateWithFlags(&st->join, cudaEventDisableTiming) != cudaSuccess) return 1;
  for (cudaEvent_t& e : st->ready)
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return 1;
  // Spinning push blocks must leave SMs for the GEMMs, of every rank when ranks share one GPU.
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  st->blocks = sms / (ctx->emulated ? 2 * ctx->world_size : 4);
  if (st->blocks < 1) st->blocks = 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor* a = kf_input(ctx, "a");
  const kf_tensor* b = kf_input(ctx, "b");
  kf_tensor* c = kf_output(ctx, "c");
  if (st == nullptr || a == nullptr || b == nullptr || c == nullptr) return 1;
  if (a->dtype != KF_BF16 && a->dtype != KF_F32) return 2;
  const int world = ctx->world_size, rank = ctx->rank;
  const int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1], nt = n * world;
  const size_t es = kf_dtype_size(a->dtype);
  const uint32_t epoch = ++st->epoch;
  Ptrs out;
  Pads pads;
  for (int q = 0; q < kMaxWorld; ++q) {
    out.p[q] = q < world ? static_cast<char*>(c->peers[q]) : nullptr;
    pads.p[q] = q < world ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
  }
  // Row chunks of at least 512 rows.
  int64_t chunks = m / 512;
  chunks = chunks < 1 ? 1 : (chunks > kMaxChunks ? kMaxChunks : chunks);
  const int64_t rows = (m + chunks - 1) / chunks;
  chunks = (m + rows - 1) / rows;
  const int64_t pitch = nt * static_cast<int64_t>(es), col0 = rank * n * static_cast<int64_t>(es),
                width = n * static_cast<int64_t>(es);
  const bool vec = pitch % 16 == 0 && col0 % 16 == 0 && width % 16 == 0;

  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaEventRecord(st->fork, ctx->stream) != cudaSuccess) return 1;
  if (cudaStreamWaitEvent(st->side, st->fork, 0) != cudaSuccess) return 1;
  const cudaDataType_t t = a->dtype == KF_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  const float alpha = 1.0f, beta = 0.0f;
  for (int64_t j = 0; j < chunks; ++j) {
    const int64_t r0 = j * rows, r1 = r0 + rows < m ? r0 + rows : m;
    // Row-major c[r0:r1, rank*N:(rank+1)*N] = a[r0:r1, :] @ b (leading dimension W*N) is
    // column-major c^T = b^T a^T.
    if (cublasGemmEx(st->handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n),
                     static_cast<int>(r1 - r0), static_cast<int>(k), &alpha, b->data, t,
                     static_cast<int>(n), static_cast<const char*>(a->data) + r0 * k * es, t,
                     static_cast<int>(k), &beta, static_cast<char*>(c->data) + r0 * pitch + col0, t,
                     static_cast<int>(nt), CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
      return 1;
    if (cudaEventRecord(st->ready[j], ctx->stream) != cudaSuccess) return 1;
    if (cudaStreamWaitEvent(st->side, st->ready[j], 0) != cudaSuccess) return 1;
    Push<<<st->blocks, kThreads, 0, st->side>>>(out, pads, rank, world, epoch, r0, r1, pitch, col0,
                                                width, vec);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  EndBarrier<<<1, 32, 0, st->side>>>(pads, rank, world, epoch);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (cudaEventRecord(st->join, st->side) != cudaSuccess) return 1;
  return cudaStreamWaitEvent(ctx->stream, st->join, 0) == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (st->side != nullptr && cudaStreamDestroy(st->side) != cudaSuccess) rc = 1;
  if (st->fork != nullptr) cudaEventDestroy(st->fork);
  if (st->join != nullptr) cudaEventDestroy(st->join);
  for (cudaEvent_t e : st->ready)
    if (e != nullptr) cudaEventDestroy(e);
  if (st->handle != nullptr && cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  if (st->cublas_ws != nullptr && cudaFree(st->cublas_ws) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
