// Transposed all-gather + GEMM baseline, PKB's reference without its initial transpose: one harness
// all-gather of the K-major shards (NCCL when every rank has its own GPU), which lands contiguously
// as X^T[W*K, M] in the workspace, then one cuBLAS GEMM c = X @ b reading X^T transposed (fp32
// accumulation).
#include <cublas_v2.h>

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
  const kf_tensor* a = kf_input(ctx, "a_t");
  const kf_tensor* b = kf_input(ctx, "b");
  kf_tensor* c = kf_output(ctx, "c");
  if (st == nullptr || a == nullptr || b == nullptr || c == nullptr) return 1;
  if (a->dtype != KF_BF16 && a->dtype != KF_F32) return 2;
  const int64_t k = a->shape[0], m = a->shape[1], n = b->shape[1], kt = k * ctx->world_size;
  if (ctx->workspace.nbytes < static_cast<size_t>(kt * m) * kf_dtype_size(a->dtype)) return 1;
  void* xt = ctx->workspace.data;
  if (kf_all_gather(ctx, a->data, xt, static_cast<size_t>(a->numel), a->dtype) != 0) return 1;
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  // Row-major c = X @ b is column-major c^T = b^T X^T, and X^T stored row-major [W*K, M] is
  // column-major X [M, W*K] with leading dimension M: hence op T on it.
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t t = a->dtype == KF_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  return cublasGemmEx(st->handle, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(n),
                      static_cast<int>(m), static_cast<int>(kt), &alpha, b->data, t,
                      static_cast<int>(n), xt, t, static_cast<int>(m), &beta, c->data, t,
                      static_cast<int>(n), CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS
             ? 0
             : 1;
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
