// DDP + Adam baseline: harness broadcasts of rank 0's parameters and moments
// (in place), the MLP forward and backward with cuBLAS (bf16 operands, fp32
// accumulation) into one flat f32 gradient [W1 | b1 | W2 | b2], one harness
// all-reduce of that gradient, and an elementwise Adam kernel per parameter
// that divides by W. The bias gradients are GEMMs with a ones vector.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdio.h>

#include "kforge/kernel.h"

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
};

// Row-major C[m, n] = op(A) * op(B) (+ beta C): column-major cuBLAS computes
// C^T = op(B)^T op(A)^T, so the operands swap and the leading dimensions are
// the row-major row lengths.
cublasStatus_t Gemm(cublasHandle_t h, bool ta, bool tb, int m, int n, int k, const void* a, int lda,
                    const void* b, int ldb, float* c, int ldc, float beta = 0.0f) {
  const float alpha = 1.0f;
  return cublasGemmEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                      &alpha, b, CUDA_R_16BF, ldb, a, CUDA_R_16BF, lda, &beta, c, CUDA_R_32F, ldc,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

// h = bf16(relu(z + b1)) for z [n, hidden].
__global__ void BiasRelu(const float* z, const __nv_bfloat16* b1, __nv_bfloat16* h, int64_t n,
                         int hidden) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * hidden;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    h[i] = __float2bfloat16_rn(fmaxf(z[i] + __bfloat162float(b1[i % hidden]), 0.0f));
  }
}

// dout = bf16(2 (out + b2 - y) / (n d_out)); also fills the ones vector.
__global__ void MseGrad(const float* out, const __nv_bfloat16* b2, const __nv_bfloat16* y,
                        __nv_bfloat16* dout, __nv_bfloat16* ones, int64_t n, int d_out) {
  const float scale = 2.0f / static_cast<float>(n * d_out);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * d_out;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float e = out[i] + __bfloat162float(b2[i % d_out]) - __bfloat162float(y[i]);
    dout[i] = __float2bfloat16_rn(scale * e);
    if (i < n) ones[i] = __float2bfloat16_rn(1.0f);
  }
}

// dh = relu'(z) * (dout W2), written over h (h > 0 exactly where z + b1 > 0,
// up to values below bf16's smallest subnormal).
__global__ void ReluGrad(const float* dh, __nv_bfloat16* h, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    h[i] = __bfloat162float(h[i]) > 0.0f ? __float2bfloat16_rn(dh[i]) : __float2bfloat16_rn(0.0f);
  }
}

// Adam on one parameter tensor; g is the all-reduced sum (divided by W here).
__global__ void Adam(__nv_bfloat16* p, float* m, float* v, const float* g, int64_t count,
                     const int* step, float inv_world, float lr, float beta1, float beta2,
                     float eps, double beta1_d, double beta2_d) {
  __shared__ float step_size, inv_bc2_sqrt;
  if (threadIdx.x == 0) {
    const double t = static_cast<double>(*step);
    step_size = static_cast<float>(lr / (1.0 - pow(beta1_d, t)));
    inv_bc2_sqrt = static_cast<float>(1.0 / sqrt(1.0 - pow(beta2_d, t)));
  }
  __syncthreads();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gi = g[i] * inv_world;
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float pi = __bfloat162float(p[i]) - step_size * mi / (sqrtf(vi) * inv_bc2_sqrt + eps);
    p[i] = __float2bfloat16_rn(pi);
  }
}

int Blocks(int64_t count) {
  int64_t b = (count + 255) / 256;
  if (b > 4096) b = 4096;
  return b < 1 ? 1 : static_cast<int>(b);
}

// Bump allocation inside the workspace, 256-byte aligned.
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
  const kf_tensor* x = kf_input(ctx, "X");
  const kf_tensor* y = kf_input(ctx, "y");
  const kf_tensor* step = kf_input(ctx, "step");
  const char* names[4] = {"W1", "b1", "W2", "b2"};
  kf_tensor* p[4];
  kf_tensor* m[4];
  kf_tensor* v[4];
  char buf[32];
  for (int k = 0; k < 4; ++k) {
    p[k] = kf_input(ctx, names[k]);
    snprintf(buf, sizeof(buf), "exp_avg_%s", names[k]);
    m[k] = kf_input(ctx, buf);
    snprintf(buf, sizeof(buf), "exp_avg_sq_%s", names[k]);
    v[k] = kf_input(ctx, buf);
    if (!p[k] || !m[k] || !v[k]) return 1;
  }
  if (!st || !x || !y || !step || x->dtype != KF_BF16) return 1;
  const int64_t n = x->shape[0];
  const int d_in = static_cast<int>(x->shape[1]);
  const int d_out = static_cast<int>(y->shape[1]);
  const int hidden = static_cast<int>(p[0]->shape[0]);
  const int world = ctx->world_size;
  cudaStream_t s = ctx->stream;

  // 1. Rank 0's parameters and moments, everywhere (in place).
  for (int k = 0; k < 4; ++k) {
    if (kf_broadcast(ctx, p[k]->data, p[k]->data, p[k]->numel, KF_BF16, 0) != 0) return 1;
    if (kf_broadcast(ctx, m[k]->data, m[k]->data, m[k]->numel, KF_F32, 0) != 0) return 1;
    if (kf_broadcast(ctx, v[k]->data, v[k]->data, v[k]->numel, KF_F32, 0) != 0) return 1;
  }

  // 2. Workspace: z/out/dh (f32), h/dh (bf16), dout (bf16), ones, flat gradient.
  int64_t offset[5] = {0};
  for (int k = 0; k < 4; ++k) offset[k + 1] = offset[k] + p[k]->numel;
  const int64_t total = offset[4];
  char* cur = static_cast<char*>(ctx->workspace.data);
  float* zf = reinterpret_cast<float*>(Take(&cur, 4 * n * (hidden > d_out ? hidden : d_out)));
  __nv_bfloat16* h = reinterpret_cast<__nv_bfloat16*>(Take(&cur, 2 * n * hidden));
  __nv_bfloat16* dout = reinterpret_cast<__nv_bfloat16*>(Take(&cur, 2 * n * d_out));
  __nv_bfloat16* ones = reinterpret_cast<__nv_bfloat16*>(Take(&cur, 2 * n));
  float* grad = reinterpret_cast<float*>(Take(&cur, 4 * total));
  if (cur > static_cast<char*>(ctx->workspace.data) + ctx->workspace.nbytes) return 1;

  if (cublasSetStream(st->handle, s) != CUBLAS_STATUS_SUCCESS) return 1;
  const int nn = static_cast<int>(n);
  const auto* xd = static_cast<const __nv_bfloat16*>(x->data);
  const auto* w1 = static_cast<const __nv_bfloat16*>(p[0]->data);
  const auto* b1 = static_cast<const __nv_bfloat16*>(p[1]->data);
  const auto* w2 = static_cast<const __nv_bfloat16*>(p[2]->data);
  const auto* b2 = static_cast<const __nv_bfloat16*>(p[3]->data);
  // 3. Forward: z = X W1^T, h = relu(z + b1), out = h W2^T.
  if (Gemm(st->handle, false, true, nn, hidden, d_in, xd, d_in, w1, d_in, zf, hidden) !=
      CUBLAS_STATUS_SUCCESS) {
    return 1;
  }
  BiasRelu<<<Blocks(n * hidden), 256, 0, s>>>(zf, b1, h, n, hidden);
  if (Gemm(st->handle, false, true, nn, d_out, hidden, h, hidden, w2, hidden, zf, d_out) !=
      CUBLAS_STATUS_SUCCESS) {
    return 1;
  }
  MseGrad<<<Blocks(n * d_out), 256, 0, s>>>(zf, b2, static_cast<const __nv_bfloat16*>(y->data),
                                            dout, ones, n, d_out);
  // 4. Backward: gW2 = dout^T h, gb2 = dout^T 1, dh = dout W2 (masked), gW1 = dh^T X, gb1 = dh^T 1.
  if (Gemm(st->handle, true, false, d_out, hidden, nn, dout, d_out, h, hidden, grad + offset[2],
           hidden) != CUBLAS_STATUS_SUCCESS ||
      Gemm(st->handle, true, false, d_out, 1, nn, dout, d_out, ones, 1, grad + offset[3], 1) !=
          CUBLAS_STATUS_SUCCESS ||
      Gemm(st->handle, false, false, nn, hidden, d_out, dout, d_out, w2, hidden, zf, hidden) !=
          CUBLAS_STATUS_SUCCESS) {
    return 1;
  }
  ReluGrad<<<Blocks(n * hidden), 256, 0, s>>>(zf, h, n * hidden);
  if (Gemm(st->handle, true, false, hidden, d_in, nn, h, hidden, xd, d_in, grad + offset[0],
           d_in) != CUBLAS_STATUS_SUCCESS ||
      Gemm(st->handle, true, false, hidden, 1, nn, h, hidden, ones, 1, grad + offset[1], 1) !=
          CUBLAS_STATUS_SUCCESS) {
    return 1;
  }
  if (cudaGetLastError() != cudaSuccess) return 1;
  // 5. Sum the gradients over ranks; Adam divides by W.
  if (kf_all_reduce(ctx, grad, grad, static_cast<size_t>(total), KF_F32, KF_SUM) != 0) return 1;
  const double beta1 = kf_param(ctx, "beta1", 0.9), beta2 = kf_param(ctx, "beta2", 0.999);
  const float lr = static_cast<float>(kf_param(ctx, "lr", 1e-3));
  const float eps = static_cast<float>(kf_param(ctx, "eps", 1e-8));
  for (int k = 0; k < 4; ++k) {
    Adam<<<Blocks(p[k]->numel), 256, 0, s>>>(
        static_cast<__nv_bfloat16*>(p[k]->data), static_cast<float*>(m[k]->data),
        static_cast<float*>(v[k]->data), grad + offset[k], p[k]->numel,
        static_cast<const int*>(step->data), 1.0f / world, lr, static_cast<float>(beta1),
        static_cast<float>(beta2), eps, beta1, beta2);
  }
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
