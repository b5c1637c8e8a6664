// Row-parallel linear baseline, as vLLM's RowParallelLinear runs at decode:
// F.linear on the rank's shard (one cuBLAS GEMM, bf16 in and out, fp32
// accumulation) into the workspace, then tensor_model_parallel_all_reduce (one
// harness all-reduce, NCCL when every rank has its own GPU, bf16).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "kforge/kernel.h"

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
};

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
  const kf_tensor* x = kf_input(ctx, "x");
  const kf_tensor* w = kf_input(ctx, "w");
  kf_tensor* y = kf_output(ctx, "y");
  if (st == nullptr || x == nullptr || w == nullptr || y == nullptr || x->dtype != KF_BF16)
    return 1;
  const int64_t b = x->shape[0], kr = x->shape[1], n = w->shape[0];
  if (ctx->workspace.nbytes < static_cast<size_t>(b * n) * sizeof(__nv_bfloat16)) return 1;
  void* partial = ctx->workspace.data;
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  // Row-major partial[B, N] = x[B, Kr] @ w[N, Kr]^T is column-major partial^T = w x^T, where the
  // row-major w is column-major [Kr, N] (so op T) and the row-major x is column-major [Kr, B].
  const float alpha = 1.0f, beta = 0.0f;
  if (cublasGemmEx(st->handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(b),
                   static_cast<int>(kr), &alpha, w->data, CUDA_R_16BF, static_cast<int>(kr),
                   x->data, CUDA_R_16BF, static_cast<int>(kr), &beta, partial, CUDA_R_16BF,
                   static_cast<int>(n), CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
    return 1;
  return kf_all_reduce(ctx, partial, y->data, static_cast<size_t>(b * n), KF_BF16, KF_SUM);
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
