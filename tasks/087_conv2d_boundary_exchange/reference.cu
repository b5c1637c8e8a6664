// Patch-parallel conv2d baseline, as PKB's reference does it: every rank packs
// its first and last rows, one harness all-gather of them over the whole world
// (NCCL on real GPUs), then the 3x3 convolution of [row above | own rows |
// row below] with the neighbours' rows (zeros at the image's edges). The
// convolution is im2col + one cuBLAS GEMM with fp32 accumulation (no cuDNN
// here): y is first filled with the bias and the GEMM adds onto it (beta = 1),
// so the output is rounded once.
//
// As matrices: y[C, h*Wd] = w[C, 9C] @ col[9C, h*Wd] + b, with
// col[(c*3 + u)*3 + v, i*Wd + j] = X[c, i + u - 1, j + v - 1].
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
};

// local[0, c, :] = x[c, 0, :], local[1, c, :] = x[c, h-1, :].
template <typename T>
__global__ void PackRows(const T* __restrict__ x, T* __restrict__ local, int64_t c, int64_t h,
                         int64_t wd) {
  const int64_t n = 2 * c * wd;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t side = e / (c * wd), rest = e - side * c * wd;
    const int64_t ch = rest / wd, j = rest - ch * wd;
    local[e] = x[(ch * h + (side == 0 ? 0 : h - 1)) * wd + j];
  }
}

template <typename T>
__global__ void FillBias(const T* __restrict__ b, T* __restrict__ y, int64_t c, int64_t pixels) {
  const int64_t n = c * pixels;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[e] = b[e / pixels];
}

// col[q, p] for q = (c*3 + u)*3 + v, p = i*Wd + j: X[c, i+u-1, j+v-1], where row
// -1 is above[c*Wd + ..] and row h is below[c*Wd + ..] (null: zeros). A warp
// fills one line (q, i) of Wd columns: coalesced, index math once per line.
template <typename T>
__global__ void Im2col(const T* __restrict__ x, const T* __restrict__ above,
                       const T* __restrict__ below, T* __restrict__ col, int64_t c, int64_t h,
                       int64_t wd) {
  const int lane = threadIdx.x % 32;
  const int64_t lines = 9 * c * h;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t line = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
       line < lines; line += warps) {
    const int64_t q = line / h, out_row = line - q * h;
    const int64_t ch = q / 9, u = (q % 9) / 3, v = q % 3;
    const int64_t i = out_row + u - 1;
    const T* src = nullptr;  // row i of channel ch, or null: zeros
    if (i < 0) {
      src = above != nullptr ? above + ch * wd : nullptr;
    } else if (i >= h) {
      src = below != nullptr ? below + ch * wd : nullptr;
    } else {
      src = x + (ch * h + i) * wd;
    }
    T* dst = col + line * wd;
    for (int64_t j = lane; j < wd; j += 32) {
      const int64_t jj = j + v - 1;
      dst[j] = src != nullptr && jj >= 0 && jj < wd ? src[jj] : T(0.f);
    }
  }
}

int Grid(int64_t n) {
  const int64_t want = (n + 255) / 256;
  return static_cast<int>(want < 1 ? 1 : (want > 65536 ? 65536 : want));
}

size_t Aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

template <typename T>
int Run(kf_ctx* ctx, State* st, cudaDataType_t type) {
  const kf_tensor& xt = ctx->inputs[0];
  const kf_tensor& wt = ctx->inputs[1];
  const kf_tensor& bt = ctx->inputs[2];
  kf_tensor& yt = ctx->outputs[0];
  const int rank = ctx->rank, world = ctx->world_size;
  const int64_t c = xt.shape[1], h = xt.shape[2], wd = xt.shape[3], np = h * wd;
  const size_t col_bytes = Aligned(9 * c * np * sizeof(T));
  const size_t rows_bytes = Aligned(2 * c * wd * sizeof(T));
  if (ctx->workspace.nbytes < col_bytes + rows_bytes * (world + 1)) return 1;
  char* ws = static_cast<char*>(ctx->workspace.data);
  T* col = reinterpret_cast<T*>(ws);
  T* local = reinterpret_cast<T*>(ws + col_bytes);
  T* gathered = reinterpret_cast<T*>(ws + col_bytes + rows_bytes);  // [W, 2, C, Wd]
  const T* x = static_cast<const T*>(xt.data);

  PackRows<T><<<Grid(2 * c * wd), 256, 0, ctx->stream>>>(x, local, c, h, wd);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_gather(ctx, local, gathered, static_cast<size_t>(2 * c * wd), xt.dtype) != 0) return 1;
  // Rank r-1's last row, rank r+1's first row.
  const T* above = rank > 0 ? gathered + ((rank - 1) * 2 + 1) * c * wd : nullptr;
  const T* below = rank < world - 1 ? gathered + ((rank + 1) * 2 + 0) * c * wd : nullptr;
  FillBias<T><<<Grid(c * np), 256, 0, ctx->stream>>>(static_cast<const T*>(bt.data),
                                                     static_cast<T*>(yt.data), c, np);
  Im2col<T><<<Grid(9 * c * h * 32), 256, 0, ctx->stream>>>(x, above, below, col, c, h, wd);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  // Row-major y[C, np] = w[C, 9C] @ col[9C, np] + y is column-major
  // y^T[np, C] = col^T[np, 9C] @ w^T[9C, C] + y^T.
  const float alpha = 1.0f, beta = 1.0f;
  return cublasGemmEx(st->handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(np),
                      static_cast<int>(c), static_cast<int>(9 * c), &alpha, col, type,
                      static_cast<int>(np), wt.data, type, static_cast<int>(9 * c), &beta, yt.data,
                      type, static_cast<int>(np), CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS
             ? 0
             : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
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
  if (st == nullptr || ctx->num_inputs < 3 || ctx->num_outputs < 1 || ctx->inputs[0].ndim != 4)
    return 1;
  if (ctx->inputs[0].dtype == KF_BF16) return Run<__nv_bfloat16>(ctx, st, CUDA_R_16BF);
  if (ctx->inputs[0].dtype == KF_F32) return Run<float>(ctx, st, CUDA_R_32F);
  return 2;
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
