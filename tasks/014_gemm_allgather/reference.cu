// Column-parallel GEMM + all-gather baseline, as torch runs PKB's reference: one cuBLAS GEMM of the
// rank's block (fp32 accumulation) into the workspace, one harness all-gather (NCCL when every rank
// has its own GPU) into [W, M, N], and a copy kernel that lays the blocks side by side as c[M, W*N]
// (torch.cat on dim 1).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "kforge/kernel.h"

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
};

// c[i, q*n + j] = gathered[q, i, j].
template <typename T>
__global__ void Interleave(const T* gathered, T* c, int64_t m, int64_t n, int world) {
  const int64_t nt = n * world;
  const int64_t total = m * nt;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / nt, col = e % nt;
    c[e] = gathered[(col / n) * m * n + i * n + col % n];
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
  const int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
  const size_t es = kf_dtype_size(a->dtype);
  const size_t block = (static_cast<size_t>(m * n) * es + 255) / 256 * 256;
  if (ctx->workspace.nbytes < block + static_cast<size_t>(world * m * n) * es) return 1;
  char* local = static_cast<char*>(ctx->workspace.data);
  char* gathered = local + block;
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  // Row-major local = a @ b is column-major local^T = b^T a^T.
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t t = a->dtype == KF_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  if (cublasGemmEx(st->handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                   static_cast<int>(k), &alpha, b->data, t, static_cast<int>(n), a->data, t,
                   static_cast<int>(k), &beta, local, t, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
    return 1;
  if (kf_all_gather(ctx, local, gathered, static_cast<size_t>(m * n), a->dtype) != 0) return 1;
  const int64_t total = m * n * world;
  int blocks = static_cast<int>((total + 255) / 256);
  if (blocks > 4096) blocks = 4096;
  if (a->dtype == KF_BF16)
    Interleave<<<blocks, 256, 0, ctx->stream>>>(reinterpret_cast<const __nv_bfloat16*>(gathered),
                                                static_cast<__nv_bfloat16*>(c->data), m, n, world);
  else
    Interleave<<<blocks, 256, 0, ctx->stream>>>(reinterpret_cast<const float*>(gathered),
                                                static_cast<float*>(c->data), m, n, world);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
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
