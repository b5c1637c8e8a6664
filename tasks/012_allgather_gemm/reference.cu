// All-gather + GEMM baseline, as torch runs PKB's reference: one harness all-gather of the K-shards
// (NCCL when every rank has its own GPU) into the workspace as [W, M, K], a copy kernel that lays
// them side by side as X[M, W*K] (torch.cat on dim 1), then one cuBLAS GEMM with fp32 accumulation.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "kforge/kernel.h"

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
};

cudaDataType_t CudaType(kf_dtype dt) { return dt == KF_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// x[i, q*k + j] = gathered[q, i, j].
template <typename T>
__global__ void Interleave(const T* gathered, T* x, int64_t m, int64_t k, int world) {
  const int64_t total = m * k * world;
  const int64_t kt = k * world;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / kt, col = e % kt;
    x[e] = gathered[(col / k) * m * k + i * k + col % k];
  }
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
  const int world = ctx->world_size;
  const int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1], kt = k * world;
  const size_t es = kf_dtype_size(a->dtype);
  // Two [M, W*K] regions, the second 256-byte aligned.
  const size_t region = (static_cast<size_t>(m * kt) * es + 255) / 256 * 256;
  if (ctx->workspace.nbytes < 2 * region) return 1;
  char* gathered = static_cast<char*>(ctx->workspace.data);
  char* x = gathered + region;
  if (kf_all_gather(ctx, a->data, gathered, static_cast<size_t>(a->numel), a->dtype) != 0) return 1;
  const int64_t total = m * kt;
  int blocks = static_cast<int>((total + 255) / 256);
  if (blocks > 4096) blocks = 4096;
  if (a->dtype == KF_BF16)
    Interleave<<<blocks, 256, 0, ctx->stream>>>(reinterpret_cast<const __nv_bfloat16*>(gathered),
                                                reinterpret_cast<__nv_bfloat16*>(x), m, k, world);
  else
    Interleave<<<blocks, 256, 0, ctx->stream>>>(reinterpret_cast<const float*>(gathered),
                                                reinterpret_cast<float*>(x), m, k, world);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  // Row-major c = x @ b is column-major c^T = b^T x^T.
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t t = CudaType(a->dtype);
  return cublasGemmEx(st->handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n),
                      static_cast<int>(m), static_cast<int>(kt), &alpha, b->data, t,
                      static_cast<int>(n), x, t, static_cast<int>(kt), &beta, c->data, t,
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
