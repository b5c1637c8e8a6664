// GEMM + all-reduce with the reduction of one column chunk overlapped with the GEMM of the next.
//
//   main stream:  GEMM chunk 0 | GEMM chunk 1 | GEMM chunk 2 | ...     (cuBLAS, into workspace)
//   side stream:                | reduce 0     | reduce 1     | ... | end barrier
//
// Chunk j is a block of columns of the partial product p = a @ b (bf16 or f32, in this rank's
// workspace). When chunk j of this rank's p is written, the side stream's reduce kernel tells every
// peer so (flag [j * W + rank] of the peer's signal pad, value = this call's epoch) and waits for
// the same flag from every peer. Then rank r sums rows [r*R, (r+1)*R) of chunk j over the W
// partials (peer loads, fp32) and stores the rounded result into the c of EVERY rank (peer stores):
// each rank reduces 1/W of the matrix and the result reaches everyone in the same pass, so the data
// crosses the links once each way, as in a two-shot all-reduce, while the GEMM of chunk j+1 keeps
// the tensor cores busy.
//
// Ordering: a rank signals chunk j only after its own GEMM of chunk j (stream order, via an event)
// and after its c was poisoned for this call (the side stream starts behind everything already on
// ctx->stream), so a peer never reads a stale partial nor writes into a c the harness has not
// reset. The end barrier (flag [kDoneBase + src]) keeps every rank in the call until all peers have
// finished reading its partials and writing its c; the main stream joins the side stream behind it.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kMaxWorld = 8;
constexpr int kMaxChunks = 8;
constexpr int kThreads = 256;
constexpr int kDoneBase = kMaxChunks * kMaxWorld;  // pad slots after the chunk flags
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
  uint32_t epoch = 0;  // calls made; every rank makes the same calls, so epochs agree
  int blocks = 1;
};

template <typename T>
struct Vec;
template <>
struct Vec<float> {
  static constexpr int kN = 4;
  __device__ static void Add(const uint4& v, float* f) {
    f[0] += __uint_as_float(v.x);
    f[1] += __uint_as_float(v.y);
    f[2] += __uint_as_float(v.z);
    f[3] += __uint_as_float(v.w);
  }
  __device__ static uint4 Pack(const float* f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                      __float_as_uint(f[3]));
  }
  __device__ static float Load(const float* p) { return *p; }
  __device__ static float Cast(float v) { return v; }
};
template <>
struct Vec<__nv_bfloat16> {
  static constexpr int kN = 8;
  __device__ static void Add(const uint4& v, float* f) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 t = __bfloat1622float2(h[i]);
      f[2 * i] += t.x;
      f[2 * i + 1] += t.y;
    }
  }
  __device__ static uint4 Pack(const float* f) {
    uint4 v;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return v;
  }
  __device__ static float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
  __device__ static __nv_bfloat16 Cast(float v) { return __float2bfloat16_rn(v); }
};

// Reduces this rank's rows of column chunk `chunk` ([c0, c0 + w)) over every rank's partial and
// writes the sum into every rank's c. Every block signals (idempotent) and waits by itself, so no
// block depends on another being resident.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ReduceChunk(Ptrs part, Ptrs out, Pads pads, int rank, int world, int chunk, uint32_t epoch,
                int64_t m, int64_t n, int64_t c0, int64_t w, bool vec) {
  if (threadIdx.x < world) {
    kf_signal(pads.p[threadIdx.x] + chunk * world + rank, epoch);
    kf_wait(pads.p[rank] + chunk * world + threadIdx.x, epoch);
  }
  __syncthreads();
  const int64_t share = (m + world - 1) / world;
  const int64_t r0 = rank * share;
  const int64_t r1 = r0 + share < m ? r0 + share : m;
  if (r0 >= r1) return;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  using V = Vec<T>;
  if (vec) {
    const int64_t per_row = w / V::kN;
    const int64_t units = (r1 - r0) * per_row;
    for (int64_t u = first; u < units; u += stride) {
      const int64_t off = (r0 + u / per_row) * n + c0 + (u % per_row) * V::kN;
      float acc[V::kN] = {};
      uint4 v[kMaxWorld];
#pragma unroll
      for (int q = 0; q < kMaxWorld; ++q)
        if (q < world)
          v[q] = *reinterpret_cast<const uint4*>(reinterpret_cast<const T*>(part.p[q]) + off);
#pragma unroll
      for (int q = 0; q < kMaxWorld; ++q)
        if (q < world) V::Add(v[q], acc);
      const uint4 s = V::Pack(acc);
#pragma unroll
      for (int q = 0; q < kMaxWorld; ++q)
        if (q < world) *reinterpret_cast<uint4*>(reinterpret_cast<T*>(out.p[q]) + off) = s;
    }
  } else {
    const int64_t units = (r1 - r0) * w;
    for (int64_t u = first; u < units; u += stride) {
      const int64_t off = (r0 + u / w) * n + c0 + u % w;
      float acc = 0.f;
      for (int q = 0; q < world; ++q) acc += V::Load(reinterpret_cast<const T*>(part.p[q]) + off);
      const T s = V::Cast(acc);
      for (int q = 0; q < world; ++q) reinterpret_cast<T*>(out.p[q])[off] = s;
    }
  }
}

// Every rank has finished reading every partial and writing every c of this call.
__global__ void EndBarrier(Pads pads, int rank, int world, uint32_t epoch) {
  const int q = threadIdx.x;
  if (q < world) {
    __threadfence_system();
    kf_signal(pads.p[q] + kDoneBase + rank, epoch);
    kf_wait(pads.p[rank] + kDoneBase + q, epoch);
  }
}

cudaDataType_t CudaType(kf_dtype dt) { return dt == KF_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// Row-major p[:, c0:c0+w] = a[m,k] @ b[:, c0:c0+w] (b and p have n columns); cuBLAS is
// column-major, so this is p^T = b^T a^T.
cublasStatus_t GemmColumns(cublasHandle_t h, kf_dtype dt, int64_t m, int64_t n, int64_t k,
                           int64_t c0, int64_t w, const void* a, const void* b, void* p) {
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t t = CudaType(dt);
  const size_t es = kf_dtype_size(dt);
  return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(w), static_cast<int>(m),
                      static_cast<int>(k), &alpha, static_cast<const char*>(b) + c0 * es, t,
                      static_cast<int>(n), a, t, static_cast<int>(k), &beta,
                      static_cast<char*>(p) + c0 * es, t, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT);
}

template <typename T>
int Run(kf_ctx* ctx, State* st) {
  const kf_tensor& a = *kf_input(ctx, "a");
  const kf_tensor& b = *kf_input(ctx, "b");
  const kf_tensor& c = *kf_output(ctx, "c");
  const int world = ctx->world_size, rank = ctx->rank;
  const int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  if (ctx->workspace.nbytes < c.nbytes) return 1;
  const uint32_t epoch = ++st->epoch;

  Ptrs part, out;
  Pads pads;
  for (int q = 0; q < kMaxWorld; ++q) {
    part.p[q] = q < world ? static_cast<char*>(ctx->workspace.peers[q]) : nullptr;
    out.p[q] = q < world ? static_cast<char*>(c.peers[q]) : nullptr;
    pads.p[q] = q < world ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
  }
  // Chunks of at least 512 columns, a multiple of 8 elements wide so every chunk starts on 16
  // bytes.
  int64_t chunks = n / 512;
  chunks = chunks < 1 ? 1 : (chunks > kMaxChunks ? kMaxChunks : chunks);
  const int64_t width = ((n + chunks - 1) / chunks + 7) / 8 * 8;
  chunks = (n + width - 1) / width;

  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaEventRecord(st->fork, ctx->stream) != cudaSuccess) return 1;
  if (cudaStreamWaitEvent(st->side, st->fork, 0) != cudaSuccess) return 1;
  for (int64_t j = 0; j < chunks; ++j) {
    const int64_t c0 = j * width;
    const int64_t w = c0 + width < n ? width : n - c0;
    if (GemmColumns(st->handle, a.dtype, m, n, k, c0, w, a.data, b.data, ctx->workspace.data) !=
        CUBLAS_STATUS_SUCCESS)
      return 1;
    if (cudaEventRecord(st->ready[j], ctx->stream) != cudaSuccess) return 1;
    if (cudaStreamWaitEvent(st->side, st->ready[j], 0) != cudaSuccess) return 1;
    const bool vec = n % Vec<T>::kN == 0 && c0 % Vec<T>::kN == 0 && w % Vec<T>::kN == 0;
    ReduceChunk<T><<<st->blocks, kThreads, 0, st->side>>>(
        part, out, pads, rank, world, static_cast<int>(j), epoch, m, n, c0, w, vec);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  EndBarrier<<<1, 32, 0, st->side>>>(pads, rank, world, epoch);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (cudaEventRecord(st->join, st->side) != cudaSuccess) return 1;
  return cudaStreamWaitEvent(ctx->stream, st->join, 0) == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size > kMaxWorld) return 1;
  if (ctx->signal_pad.nbytes < sizeof(uint32_t) * (kDoneBase + kMaxWorld)) return 1;
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
  // Spinning reduce blocks must leave SMs for the GEMMs, of every rank when ranks share one GPU.
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  st->blocks = sms / (ctx->emulated ? 2 * ctx->world_size : 4);
  if (st->blocks < 1) st->blocks = 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr || kf_input(ctx, "a") == nullptr || kf_input(ctx, "b") == nullptr ||
      kf_output(ctx, "c") == nullptr)
    return 1;
  switch (kf_input(ctx, "a")->dtype) {
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
