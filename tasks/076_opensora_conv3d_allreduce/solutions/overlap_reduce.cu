// Tensor-parallel conv3d with the all-reduce of finished output chunks overlapped with the
// convolution of later ones, and the bias fused into the reduction.
//
//   main stream:  im2col+GEMM chunk 0 | im2col+GEMM chunk 1 | ...          (cuBLAS, into workspace)
//   side stream:                      | reduce+bias 0       | reduce 1 | ... | end barrier
//
// Chunk j is a range of output positions (columns of the partial p[c_out, F*H*V] in this rank's
// workspace), small enough that its im2col buffer stays in L2 between the im2col kernel that
// writes it and the GEMM that reads it (the baseline's 256 MiB buffer goes through HBM). When chunk
// j of this rank's p is written, the side stream's reduce kernel tells every peer so (flag
// [j * W + rank] of the peer's signal pad, value = this call's epoch) and waits for the same flag
// from every peer. Then rank r sums its share of the output channels (rows) of chunk j over the W
// partials (peer loads, fp32), adds the bias, and stores the rounded result into the y of EVERY
// rank (peer stores): the data crosses the links once each way, as in a two-shot all-reduce, while
// the GEMM of chunk j+1 keeps the tensor cores busy, and y is written once instead of twice.
//
// Ordering: a rank signals chunk j only after its own GEMM of chunk j (stream order, via an event)
// and after its y was poisoned for this call (the side stream starts behind everything already on
// ctx->stream), so a peer never reads a stale partial nor writes into a y the harness has not
// reset. The end barrier (flag [kDoneBase + src]) keeps every rank in the call until all peers have
// finished reading its partials and writing its y; the main stream joins the side stream behind it.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include <vector>

#include "kforge/kernel.h"

namespace {

constexpr int kMaxWorld = 8;
constexpr int kMaxChunks = 256;
constexpr int kThreads = 256;
constexpr int kDoneBase = kMaxChunks * kMaxWorld;  // pad slots after the chunk flags
constexpr size_t kCublasWorkspace = 32u << 20;
constexpr size_t kColBytes = 16u << 20;  // im2col chunk: well inside the 50 MB L2 of an H100
constexpr int64_t kMinChunk = 1024;      // output positions; keeps each GEMM large

struct Geometry {
  int64_t cl, c_out, frames, height, width, k, npos;
};
struct Ptrs {
  __nv_bfloat16* p[kMaxWorld];
};
struct Pads {
  uint32_t* p[kMaxWorld];
};

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
  __nv_bfloat16* col = nullptr;
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  std::vector<cudaEvent_t> ready;
  int64_t chunk = 0;   // output positions per chunk
  int64_t chunks = 0;  // chunks per call
  uint32_t epoch = 0;  // calls made; every rank makes the same calls, so epochs agree
  int blocks = 1;
};

bool GeometryOf(kf_ctx* ctx, Geometry* g) {
  const kf_tensor* x = kf_input(ctx, "x");
  const kf_tensor* w = kf_input(ctx, "w");
  const kf_tensor* y = kf_output(ctx, "y");
  if (x == nullptr || w == nullptr || y == nullptr || kf_input(ctx, "b") == nullptr) return false;
  if (x->dtype != KF_BF16 || x->ndim != 5 || y->ndim != 5) return false;
  g->cl = x->shape[1];
  g->c_out = y->shape[1];
  g->frames = y->shape[2];
  g->height = y->shape[3];
  g->width = y->shape[4];
  g->k = g->cl * 27;
  g->npos = g->frames * g->height * g->width;
  return w->shape[0] == g->c_out && w->shape[1] == g->cl;
}

// col[k, j] = x[c, f+i, h+j', v+k'] for k = c*27 + 9i + 3j' + k' and output position n0 + j.
__global__ void Im2Col(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ col,
                       Geometry g, int64_t n0, int64_t nc) {
  const int height = static_cast<int>(g.height), width = static_cast<int>(g.width);
  const int wp = width + 2;
  const int64_t plane = static_cast<int64_t>(height + 2) * wp;
  for (int64_t kk = blockIdx.y; kk < g.k; kk += gridDim.y) {
    const int64_t c = kk / 27;
    const int tap = static_cast<int>(kk - c * 27);
    const __nv_bfloat16* in =
        x + c * (g.frames + 2) * plane + (tap / 9) * plane + (tap / 3 % 3) * wp + tap % 3;
    __nv_bfloat16* out = col + kk * nc;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < nc; j += gridDim.x * blockDim.x) {
      const int n = static_cast<int>(n0) + j;
      const int v = n % width, fh = n / width;
      const int h = fh % height, f = fh / height;
      out[j] = in[f * plane + h * wp + v];
    }
  }
}

__device__ void Add8(const uint4& v, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(h[i]);
    f[2 * i] += t.x;
    f[2 * i + 1] += t.y;
  }
}

__device__ uint4 Pack8(const float* f) {
  uint4 v;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

// Reduces this rank's rows of column chunk [n0, n0 + w) over every rank's partial, adds the bias
// and writes the result into every rank's y. Every block signals (idempotent) and waits by itself,
// so no block depends on another being resident.
__global__ void __launch_bounds__(kThreads)
    ReduceChunk(Ptrs part, Ptrs out, Pads pads, const __nv_bfloat16* __restrict__ bias, int rank,
                int world, int chunk, uint32_t epoch, int64_t rows, int64_t npos, int64_t n0,
                int64_t w, bool vec) {
  if (threadIdx.x < world) {
    kf_signal(pads.p[threadIdx.x] + chunk * world + rank, epoch);
    kf_wait(pads.p[rank] + chunk * world + threadIdx.x, epoch);
  }
  __syncthreads();
  const int64_t share = (rows + world - 1) / world;
  const int64_t r0 = rank * share;
  const int64_t r1 = r0 + share < rows ? r0 + share : rows;
  if (r0 >= r1) return;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (vec) {
    const int64_t per_row = w / 8;
    const int64_t units = (r1 - r0) * per_row;
    for (int64_t u = first; u < units; u += stride) {
      const int64_t row = r0 + u / per_row;
      const int64_t off = row * npos + n0 + (u % per_row) * 8;
      const float b = __bfloat162float(bias[row]);
      float acc[8] = {b, b, b, b, b, b, b, b};
      uint4 v[kMaxWorld];
#pragma unroll
      for (int q = 0; q < kMaxWorld; ++q)
        if (q < world) v[q] = *reinterpret_cast<const uint4*>(part.p[q] + off);
#pragma unroll
      for (int q = 0; q < kMaxWorld; ++q)
        if (q < world) Add8(v[q], acc);
      const uint4 s = Pack8(acc);
#pragma unroll
      for (int q = 0; q < kMaxWorld; ++q)
        if (q < world) *reinterpret_cast<uint4*>(out.p[q] + off) = s;
    }
  } else {
    const int64_t units = (r1 - r0) * w;
    for (int64_t u = first; u < units; u += stride) {
      const int64_t row = r0 + u / w;
      const int64_t off = row * npos + n0 + u % w;
      float acc = __bfloat162float(bias[row]);
      for (int q = 0; q < world; ++q) acc += __bfloat162float(part.p[q][off]);
      const __nv_bfloat16 s = __float2bfloat16_rn(acc);
      for (int q = 0; q < world; ++q) out.p[q][off] = s;
    }
  }
}

// Every rank has finished reading every partial and writing every y of this call.
__global__ void EndBarrier(Pads pads, int rank, int world, uint32_t epoch) {
  const int q = threadIdx.x;
  if (q < world) {
    __threadfence_system();
    kf_signal(pads.p[q] + kDoneBase + rank, epoch);
    kf_wait(pads.p[rank] + kDoneBase + q, epoch);
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size > kMaxWorld) return 1;
  if (ctx->signal_pad.nbytes < sizeof(uint32_t) * (kDoneBase + kMaxWorld)) return 1;
  State* st = new State;
  ctx->user = st;
  Geometry g;
  if (!GeometryOf(ctx, &g)) return 2;
  int64_t chunk = static_cast<int64_t>(kColBytes / (g.k * sizeof(__nv_bfloat16)));
  if (chunk < kMinChunk) chunk = kMinChunk;
  if (chunk < (g.npos + kMaxChunks - 1) / kMaxChunks)
    chunk = (g.npos + kMaxChunks - 1) / kMaxChunks;
  chunk = (chunk + 7) / 8 * 8;  // chunks start on 16 bytes when npos is a multiple of 8
  if (chunk > g.npos) chunk = g.npos;
  st->chunk = chunk;
  st->chunks = (g.npos + chunk - 1) / chunk;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    return 1;
  if (cudaMalloc(&st->col, static_cast<size_t>(g.k * chunk) * sizeof(__nv_bfloat16)) !=
      cudaSuccess)
    return 1;
  if (cudaStreamCreateWithFlags(&st->side, cudaStreamNonBlocking) != cudaSuccess) return 1;
  if (cudaEventCreateWithFlags(&st->fork, cudaEventDisableTiming) != cudaSuccess) return 1;
  if (cudaEventCreateWithFlags(&st->join, cudaEventDisableTiming) != cudaSuccess) return 1;
  st->ready.assign(static_cast<size_t>(st->chunks), nullptr);
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
  Geometry g;
  if (st == nullptr || !GeometryOf(ctx, &g)) return 2;
  const kf_tensor& x = *kf_input(ctx, "x");
  const kf_tensor& w = *kf_input(ctx, "w");
  const kf_tensor& b = *kf_input(ctx, "b");
  const kf_tensor& y = *kf_output(ctx, "y");
  if (ctx->workspace.nbytes < y.nbytes) return 1;
  const int world = ctx->world_size, rank = ctx->rank;
  const uint32_t epoch = ++st->epoch;

  Ptrs part, out;
  Pads pads;
  for (int q = 0; q < kMaxWorld; ++q) {
    part.p[q] = q < world ? static_cast<__nv_bfloat16*>(ctx->workspace.peers[q]) : nullptr;
    out.p[q] = q < world ? static_cast<__nv_bfloat16*>(y.peers[q]) : nullptr;
    pads.p[q] = q < world ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
  }
  __nv_bfloat16* mine = static_cast<__nv_bfloat16*>(ctx->workspace.data);

  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaEventRecord(st->fork, ctx->stream) != cudaSuccess) return 1;
  if (cudaStreamWaitEvent(st->side, st->fork, 0) != cudaSuccess) return 1;
  const float alpha = 1.0f, beta = 0.0f;
  for (int64_t j = 0; j < st->chunks; ++j) {
    const int64_t n0 = j * st->chunk;
    const int64_t nc = n0 + st->chunk < g.npos ? st->chunk : g.npos - n0;
    const int64_t xblocks = (nc + kThreads - 1) / kThreads;
    const dim3 grid(static_cast<unsigned>(xblocks < 16 ? xblocks : 16),
                    static_cast<unsigned>(g.k < 65535 ? g.k : 65535));
    Im2Col<<<grid, kThreads, 0, ctx->stream>>>(static_cast<const __nv_bfloat16*>(x.data),
                                                st->col, g, n0, nc);
    if (cudaGetLastError() != cudaSuccess) return 1;
    // Row-major p[:, n0:n0+nc] = w[c_out, K] @ col[K, nc]; column-major that is
    // p^T (ld npos) = col^T (ld nc) @ w^T (ld K).
    if (cublasGemmEx(st->handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(nc),
                     static_cast<int>(g.c_out), static_cast<int>(g.k), &alpha, st->col,
                     CUDA_R_16BF, static_cast<int>(nc), w.data, CUDA_R_16BF,
                     static_cast<int>(g.k), &beta, mine + n0, CUDA_R_16BF,
                     static_cast<int>(g.npos), CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
      return 1;
    if (cudaEventRecord(st->ready[j], ctx->stream) != cudaSuccess) return 1;
    if (cudaStreamWaitEvent(st->side, st->ready[j], 0) != cudaSuccess) return 1;
    const bool vec = g.npos % 8 == 0 && n0 % 8 == 0 && nc % 8 == 0;
    ReduceChunk<<<st->blocks, kThreads, 0, st->side>>>(
        part, out, pads, static_cast<const __nv_bfloat16*>(b.data), rank, world,
        static_cast<int>(j), epoch, g.c_out, g.npos, n0, nc, vec);
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
  if (st->col != nullptr && cudaFree(st->col) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
