// Tensor-parallel Muon baseline: the shard in f32, its sum of squares
// all-reduced (harness all-reduce) for the global Frobenius norm, then per
// Newton-Schulz step an f32 cuBLAS Gram matrix of the shard, a harness
// all-reduce of it, and two f32 GEMMs (b A + c A A, then a X + (.) X), every
// rank computing A A in full as PKB's reference does.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "kforge/kernel.h"

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;
constexpr float kQuintic[5][3] = {{4.0848f, -6.8946f, 2.9270f},
                                  {3.9505f, -6.3029f, 2.6377f},
                                  {3.7418f, -5.5913f, 2.3037f},
                                  {2.8769f, -3.1427f, 1.2046f},
                                  {2.8366f, -3.0525f, 1.2012f}};

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
};

// Row-major C[m, n] = alpha op(A) op(B) + beta C in f32 (column-major cuBLAS
// computes C^T, so the operands swap). The default math mode: no TF32.
cublasStatus_t Sgemm(cublasHandle_t h, bool ta, bool tb, int m, int n, int k, float alpha,
                     const float* a, int lda, const float* b, int ldb, float beta, float* c,
                     int ldc) {
  return cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                     &alpha, b, ldb, a, lda, &beta, c, ldc);
}

// x (bf16) to f32 and its sum of squares, accumulated into *sum (zeroed before).
__global__ void ToF32SumSq(const __nv_bfloat16* x, float* xf, int64_t count, float* sum) {
  float local = 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = __bfloat162float(x[i]);
    xf[i] = v;
    local += v * v;
  }
  for (int off = 16; off > 0; off >>= 1) local += __shfl_down_sync(0xffffffffu, local, off);
  if ((threadIdx.x & 31) == 0) atomicAdd(sum, local);
}

__global__ void Scale(float* xf, int64_t count, const float* sum) {
  const float inv = 1.0f / fmaxf(sqrtf(*sum), 1e-7f);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    xf[i] *= inv;
  }
}

__global__ void ToBf16(const float* xf, __nv_bfloat16* y, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = __float2bfloat16_rn(xf[i]);
  }
}

int Blocks(int64_t count) {
  int64_t b = (count + 255) / 256;
  if (b > 2048) b = 2048;
  return b < 1 ? 1 : static_cast<int>(b);
}

char* Take(char** cursor, size_t bytes) {
  char* p = *cursor;
  *cursor += (bytes + 255) / 256 * 256;
  return p;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  State* st = new State;
  ctx->user = st;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS) {
    return 1;
  }
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor* x = kf_input(ctx, "x");
  kf_tensor* y = kf_output(ctx, "y");
  if (!st || !x || !y || x->dtype != KF_BF16 || x->ndim != 2) return 1;
  const int rows = static_cast<int>(x->shape[0]);
  const int cols = static_cast<int>(x->shape[1]);
  const int64_t count = x->numel;
  const int steps = static_cast<int>(kf_param(ctx, "steps", 5));
  cudaStream_t s = ctx->stream;

  char* cur = static_cast<char*>(ctx->workspace.data);
  float* xa = reinterpret_cast<float*>(Take(&cur, 4 * count));
  float* xb = reinterpret_cast<float*>(Take(&cur, 4 * count));
  float* a = reinterpret_cast<float*>(Take(&cur, 4 * static_cast<size_t>(rows) * rows));
  float* aa = reinterpret_cast<float*>(Take(&cur, 4 * static_cast<size_t>(rows) * rows));
  float* sum = reinterpret_cast<float*>(Take(&cur, 4));
  if (cur > static_cast<char*>(ctx->workspace.data) + ctx->workspace.nbytes) return 1;
  if (cublasSetStream(st->handle, s) != CUBLAS_STATUS_SUCCESS) return 1;

  // Global Frobenius norm.
  if (cudaMemsetAsync(sum, 0, sizeof(float), s) != cudaSuccess) return 1;
  ToF32SumSq<<<Blocks(count), 256, 0, s>>>(static_cast<const __nv_bfloat16*>(x->data), xa, count,
                                           sum);
  if (kf_all_reduce(ctx, sum, sum, 1, KF_F32, KF_SUM) != 0) return 1;
  Scale<<<Blocks(count), 256, 0, s>>>(xa, count, sum);
  if (cudaGetLastError() != cudaSuccess) return 1;

  const size_t gram_bytes = 4 * static_cast<size_t>(rows) * rows;
  for (int k = 0; k < steps; ++k) {
    const float* c = kQuintic[k % 5];
    // A = X X^T over this shard's columns, summed over ranks.
    if (Sgemm(st->handle, false, true, rows, rows, cols, 1.0f, xa, cols, xa, cols, 0.0f, a, rows) !=
        CUBLAS_STATUS_SUCCESS) {
      return 1;
    }
    if (kf_all_reduce(ctx, a, a, static_cast<size_t>(rows) * rows, KF_F32, KF_SUM) != 0) return 1;
    // aa = b A + c A A; xb = a X + aa X.
    if (cudaMemcpyAsync(aa, a, gram_bytes, cudaMemcpyDeviceToDevice, s) != cudaSuccess ||
        cudaMemcpyAsync(xb, xa, 4 * count, cudaMemcpyDeviceToDevice, s) != cudaSuccess) {
      return 1;
    }
    if (Sgemm(st->handle, false, false, rows, rows, rows, c[2], a, rows, a, rows, c[1], aa, rows) !=
            CUBLAS_STATUS_SUCCESS ||
        Sgemm(st->handle, false, false, rows, cols, rows, 1.0f, aa, rows, xa, cols, c[0], xb,
              cols) != CUBLAS_STATUS_SUCCESS) {
      return 1;
    }
    float* t = xa;
    xa = xb;
    xb = t;
  }
  ToBf16<<<Blocks(count), 256, 0, s>>>(xa, static_cast<__nv_bfloat16*>(y->data), count);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
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
