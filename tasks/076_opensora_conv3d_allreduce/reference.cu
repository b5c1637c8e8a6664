// Tensor-parallel conv3d baseline, Open-Sora's ChannelChunkConv3d under tensor parallelism as PKB
// runs it, with im2col + cuBLAS in place of cuDNN:
//   1. this rank's partial convolution p[c_out, F*H*V] of its input-channel shard, as GEMMs
//      p[:, n0:n0+nc] = w[c_out, K] @ col[K, nc] (K = 27 * channels per rank) over column chunks
//      of the output positions, col built by an im2col kernel (fp32 accumulation in cuBLAS, p
//      rounded to bf16 in the workspace; the chunk bounds col's memory);
//   2. kf_all_reduce of the partials into y (NCCL's ring with one GPU per rank);
//   3. y += b, per output channel (PKB adds the bias after the all-reduce, in bf16).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "kforge/kernel.h"

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;
constexpr size_t kColBudget = 256u << 20;  // bytes of im2col buffer

struct Geometry {
  int64_t cl, c_out, frames, height, width, k, npos;
};

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
  __nv_bfloat16* col = nullptr;
  int64_t chunk = 0;  // output positions per GEMM
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
// One grid row (blockIdx.y) per k; 32-bit position arithmetic (npos < 2^31).
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

__global__ void AddBias(__nv_bfloat16* __restrict__ y, const __nv_bfloat16* __restrict__ b,
                        int64_t c_out, int64_t npos) {
  const int64_t total = c_out * npos;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[e] = __float2bfloat16_rn(__bfloat162float(y[e]) + __bfloat162float(b[e / npos]));
}

int GridFor(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<int>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  State* st = new State;
  ctx->user = st;
  Geometry g;
  if (!GeometryOf(ctx, &g)) return 2;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    return 1;
  int64_t chunk = static_cast<int64_t>(kColBudget / (g.k * sizeof(__nv_bfloat16)));
  if (chunk >= 8) chunk = chunk / 8 * 8;  // 16-byte aligned column offsets
  if (chunk < 1) chunk = 1;
  if (chunk > g.npos) chunk = g.npos;
  st->chunk = chunk;
  if (cudaMalloc(&st->col, static_cast<size_t>(g.k * chunk) * sizeof(__nv_bfloat16)) != cudaSuccess)
    return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  Geometry g;
  if (st == nullptr || !GeometryOf(ctx, &g)) return 2;
  const kf_tensor* x = kf_input(ctx, "x");
  const kf_tensor* w = kf_input(ctx, "w");
  const kf_tensor* b = kf_input(ctx, "b");
  kf_tensor* y = kf_output(ctx, "y");
  if (ctx->workspace.nbytes < y->nbytes) return 1;
  auto* part = static_cast<__nv_bfloat16*>(ctx->workspace.data);
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  const float alpha = 1.0f, beta = 0.0f;
  for (int64_t n0 = 0; n0 < g.npos; n0 += st->chunk) {
    const int64_t nc = n0 + st->chunk < g.npos ? st->chunk : g.npos - n0;
    const dim3 grid(static_cast<unsigned>(GridFor(nc, 256) < 64 ? GridFor(nc, 256) : 64),
                    static_cast<unsigned>(g.k < 65535 ? g.k : 65535));
    Im2Col<<<grid, 256, 0, ctx->stream>>>(static_cast<const __nv_bfloat16*>(x->data), st->col, g,
                                          n0, nc);
    if (cudaGetLastError() != cudaSuccess) return 1;
    // Row-major p[c_out, npos] chunk = w[c_out, K] @ col[K, nc]; column-major that is
    // p^T[nc, c_out] (ld npos) = col^T[nc, K] (ld nc) @ w^T[K, c_out] (ld K).
    if (cublasGemmEx(st->handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(nc),
                     static_cast<int>(g.c_out), static_cast<int>(g.k), &alpha, st->col, CUDA_R_16BF,
                     static_cast<int>(nc), w->data, CUDA_R_16BF, static_cast<int>(g.k), &beta,
                     part + n0, CUDA_R_16BF, static_cast<int>(g.npos), CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
      return 1;
  }
  if (kf_all_reduce(ctx, part, y->data, static_cast<size_t>(y->numel), KF_BF16, KF_SUM) != 0)
    return 1;
  AddBias<<<GridFor(y->numel, 256), 256, 0, ctx->stream>>>(
      static_cast<__nv_bfloat16*>(y->data), static_cast<const __nv_bfloat16*>(b->data), g.c_out,
      g.npos);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = 0;
  if (st->handle != nullptr && cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  if (st->cublas_ws != nullptr && cudaFree(st->cublas_ws) != cudaSuccess) rc = 1;
  if (st->col != nullptr && cudaFree(st->col) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
