// Sequence-parallel MLP as a pipeline over the W token blocks, with both collectives hidden behind
// the GEMMs.
//
//   pull stream:  start barrier | pull x_0 | pull x_1 | ...                      (peer loads)
//   main stream:  block 0: GEMM w1, SiLU, GEMM w2, signal | block 1: ... | ...   (cuBLAS)
//   reduce stream:                      owner of block d: sum the W partials of block d into y
//
// y_r = rows of block r of sum over q of silu(X @ w1_q) @ w2_q, and every row block of X is one
// rank's x. So each rank runs its two GEMMs block by block, in the same order 0..W-1 on every rank:
// block d's GEMMs start as soon as x_d has been pulled from rank d (its own block at once), and
// when its partial silu(x_d @ w1) @ w2 is written the rank raises flag [kPart + rank] in rank d's
// pad. Rank d reduces block d (peer loads of the W partials, fp32, one rounding) while every rank
// computes the next blocks. Only the gather of x and each rank's own R x H result cross the links.
//
// Ordering: the start barrier (flag [kStart + src]) orders every pull after the peer entered this
// call; a partial is flagged only after the GEMM that wrote it (stream order); the end barrier
// (flag [kDone + src]) keeps every rank in the call until all peers have finished reading its x and
// its partials. Epochs grow by one per call (every rank makes the same calls).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kMaxWorld = 8;
constexpr int kThreads = 256;
constexpr int kStart = 0;             // pad slots [kStart + src]
constexpr int kPart = kMaxWorld;      // pad slots [kPart + src]: src's partial of my block
constexpr int kDone = 2 * kMaxWorld;  // pad slots [kDone + src]
constexpr int kCopyBlocks = 32;
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
  cudaStream_t pull = nullptr, reduce = nullptr;
  cudaEvent_t fork = nullptr, pulls_done = nullptr, own_part = nullptr, join = nullptr;
  cudaEvent_t pulled[kMaxWorld] = {};
  uint32_t epoch = 0;
  int blocks = 1;
};

template <typename T>
__device__ float ToF(T v) {
  return static_cast<float>(v);
}
template <typename T>
__device__ T FromF(float v) {
  return static_cast<T>(v);
}

__global__ void Barrier(Pads pads, int base, int rank, int world, uint32_t epoch) {
  const int q = threadIdx.x;
  if (q < world) {
    __threadfence_system();
    kf_signal(pads.p[q] + base + rank, epoch);
    kf_wait(pads.p[rank] + base + q, epoch);
  }
}

__global__ void Signal(uint32_t* slot, uint32_t epoch) {
  __threadfence_system();
  kf_signal(slot, epoch);
}

__global__ void Pull(const char* src, char* dst, size_t bytes) {
  const size_t vecs = bytes / 16;
  const size_t first = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = first; i < vecs; i += stride)
    reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  for (size_t i = vecs * 16 + first; i < bytes; i += stride) dst[i] = src[i];
}

template <typename T>
__global__ void SiluInPlace(T* v, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float u = ToF(v[i]);
    v[i] = FromF<T>(u / (1.0f + __expf(-u)));
  }
}

// y[e] = sum over ranks q of partial_q[base + e], once every rank has flagged its partial.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ReduceBlock(Ptrs part, T* y, Pads pads, int rank, int world, uint32_t epoch, int64_t base,
                int64_t n) {
  if (threadIdx.x < world) kf_wait(pads.p[rank] + kPart + threadIdx.x, epoch);
  __syncthreads();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = 0.f;
    for (int q = 0; q < world; ++q) acc += ToF(reinterpret_cast<const T*>(part.p[q])[base + e]);
    y[e] = FromF<T>(acc);
  }
}

// Row-major c[m,n] = a[m,k] @ b[k,n] is column-major c^T = b^T a^T.
cublasStatus_t Gemm(cublasHandle_t h, cudaDataType_t t, int64_t m, int64_t n, int64_t k,
                    const void* a, const void* b, void* c) {
  const float alpha = 1.0f, beta = 0.0f;
  return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                      static_cast<int>(k), &alpha, b, t, static_cast<int>(n), a, t,
                      static_cast<int>(k), &beta, c, t, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT);
}

size_t Align256(size_t b) { return (b + 255) / 256 * 256; }

int Blocks(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return static_cast<int>(b < 1 ? 1 : (b > 4096 ? 4096 : b));
}

template <typename T>
int Run(kf_ctx* ctx, State* st) {
  const kf_tensor& x = *kf_input(ctx, "x");
  const kf_tensor& w1 = *kf_input(ctx, "w1");
  const kf_tensor& w2 = *kf_input(ctx, "w2");
  const kf_tensor& y = *kf_output(ctx, "y");
  const int world = ctx->world_size, rank = ctx->rank;
  const int64_t rows = x.shape[0], h = x.shape[1], f = w1.shape[1];
  const cudaDataType_t t = x.dtype == KF_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  // Workspace: pulled x blocks (one slot per rank), the activations of one block, the partial
  // product of all blocks [W*R, H].
  const size_t xs = Align256(x.nbytes);
  const size_t as = Align256(static_cast<size_t>(rows * f) * sizeof(T));
  char* slots = static_cast<char*>(ctx->workspace.data);
  T* act = reinterpret_cast<T*>(slots + world * xs);
  char* part = slots + world * xs + as;
  const size_t part_offset = world * xs + as;
  if (ctx->workspace.nbytes < part_offset + static_cast<size_t>(world * rows * h) * sizeof(T))
    return 1;
  const uint32_t epoch = ++st->epoch;
  Ptrs parts;
  Pads pads;
  for (int q = 0; q < kMaxWorld; ++q) {
    parts.p[q] = q < world ? static_cast<char*>(ctx->workspace.peers[q]) + part_offset : nullptr;
    pads.p[q] = q < world ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
  }

  if (cudaEventRecord(st->fork, ctx->stream) != cudaSuccess) return 1;
  if (cudaStreamWaitEvent(st->pull, st->fork, 0) != cudaSuccess) return 1;
  if (cudaStreamWaitEvent(st->reduce, st->fork, 0) != cudaSuccess) return 1;
  Barrier<<<1, 32, 0, st->pull>>>(pads, kStart, rank, world, epoch);
  for (int d = 0; d < world; ++d) {
    if (d == rank) continue;
    Pull<<<kCopyBlocks, 256, 0, st->pull>>>(static_cast<const char*>(x.peers[d]), slots + d * xs,
                                            x.nbytes);
    if (cudaEventRecord(st->pulled[d], st->pull) != cudaSuccess) return 1;
  }
  if (cudaEventRecord(st->pulls_done, st->pull) != cudaSuccess) return 1;

  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  for (int d = 0; d < world; ++d) {
    const void* xd = d == rank ? x.data : slots + d * xs;
    if (d != rank && cudaStreamWaitEvent(ctx->stream, st->pulled[d], 0) != cudaSuccess) return 1;
    if (Gemm(st->handle, t, rows, f, h, xd, w1.data, act) != CUBLAS_STATUS_SUCCESS) return 1;
    SiluInPlace<T><<<Blocks(rows * f), 256, 0, ctx->stream>>>(act, rows * f);
    char* pd = part + static_cast<size_t>(d * rows * h) * sizeof(T);
    if (Gemm(st->handle, t, rows, h, f, act, w2.data, pd) != CUBLAS_STATUS_SUCCESS) return 1;
    Signal<<<1, 1, 0, ctx->stream>>>(pads.p[d] + kPart + rank, epoch);
    if (cudaGetLastError() != cudaSuccess) return 1;
    if (d == rank) {
      if (cudaEventRecord(st->own_part, ctx->stream) != cudaSuccess) return 1;
      if (cudaStreamWaitEvent(st->reduce, st->own_part, 0) != cudaSuccess) return 1;
      ReduceBlock<T><<<st->blocks, kThreads, 0, st->reduce>>>(
          parts, static_cast<T*>(y.data), pads, rank, world, epoch, rank * rows * h, rows * h);
      if (cudaGetLastError() != cudaSuccess) return 1;
    }
  }
  if (cudaStreamWaitEvent(st->reduce, st->pulls_done, 0) != cudaSuccess) return 1;
  Barrier<<<1, 32, 0, st->reduce>>>(pads, kDone, rank, world, epoch);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (cudaEventRecord(st->join, st->reduce) != cudaSuccess) return 1;
  return cudaStreamWaitEvent(ctx->stream, st->join, 0) == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size > kMaxWorld) return 1;
  if (ctx->signal_pad.nbytes < sizeof(uint32_t) * 3 * kMaxWorld) return 1;
  State* st = new State;
  ctx->user = st;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    return 1;
  if (cudaStreamCreateWithFlags(&st->pull, cudaStreamNonBlocking) != cudaSuccess) return 1;
  if (cudaStreamCreateWithFlags(&st->reduce, cudaStreamNonBlocking) != cudaSuccess) return 1;
  for (cudaEvent_t* e : {&st->fork, &st->pulls_done, &st->own_part, &st->join})
    if (cudaEventCreateWithFlags(e, cudaEventDisableTiming) != cudaSuccess) return 1;
  for (cudaEvent_t& e : st->pulled)
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return 1;
  // The spinning reduce blocks must leave SMs for the GEMMs, of every rank when ranks share a GPU.
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  st->blocks = sms / (ctx->emulated ? 2 * ctx->world_size : 4);
  if (st->blocks < 1) st->blocks = 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr || kf_input(ctx, "x") == nullptr || kf_input(ctx, "w1") == nullptr ||
      kf_input(ctx, "w2") == nullptr || kf_output(ctx, "y") == nullptr)
    return 1;
  switch (kf_input(ctx, "x")->dtype) {
    case KF_BF16:
      return Run<__nv_bfloat16>(ctx, st);
    case KF_F32:
      return Run<float>(ctx, st);
    default:
      return 2;
  }
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (st->pull != nullptr && cudaStreamDestroy(st->pull) != cudaSuccess) rc = 1;
  if (st->reduce != nullptr && cudaStreamDestroy(st->reduce) != cudaSuccess) rc = 1;
  for (cudaEvent_t e : {st->fork, st->pulls_done, st->own_part, st->join})
    if (e != nullptr) cudaEventDestroy(e);
  for (cudaEvent_t e : st->pulled)
    if (e != nullptr) cudaEventDestroy(e);
  if (st->handle != nullptr && cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  if (st->cublas_ws != nullptr && cudaFree(st->cublas_ws) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
