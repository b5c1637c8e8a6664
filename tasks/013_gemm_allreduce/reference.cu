// Row-parallel GEMM + all-reduce baseline: one cuBLAS GEMM of the rank's partial product (fp32
// accumulation, rounded to T) into the workspace, then one harness all-reduce into c (NCCL's ring
// when every rank has its own GPU) — Megatron's RowParallelLinear forward.
#include <cublas_v2.h>

#include "kforge/kernel.h"

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
};

cudaDataType_t CudaType(kf_dtype dt) { return dt == KF_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// Row-major c[m,n] = a[m,k] @ b[k,n]: cuBLAS is column-major, so compute c^T = b^T a^T.
cublasStatus_t GemmRowMajor(cublasHandle_t h, kf_dtype dt, int64_t m, int64_t n, int64_t k,
                            const void* a, const void* b, void* c) {
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t t = CudaType(dt);
  return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                      static_cast<int>(k), &alpha, b, t, static_cast<int>(n), a, t,
                      static_cast<int>(k), &beta, c, t, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT);
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
  const kf_tensor* a = kf_input(ctx, "a");
  const kf_tensor* b = kf_input(ctx, "b");
  kf_tensor* c = kf_output(ctx, "c");
  if (st == nullptr || a == nullptr || b == nullptr || c == nullptr) return 1;
  if (a->dtype != KF_BF16 && a->dtype != KF_F32) return 2;
  const int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
  if (ctx->workspace.nbytes < c->nbytes) return 1;
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  if (GemmRowMajor(st->handle, a->dtype, m, n, k, a->data, b->data, ctx->workspace.data) !=
      CUBLAS_STATUS_SUCCESS)
    return 1;
  return kf_all_reduce(ctx, ctx->workspace.data, c->data, static_cast<size_t>(c->numel), c->dtype,
                       KF_SUM);
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
