// Sequence-parallel MLP baseline, as Megatron runs it: one harness all-gather of the token shards
// (NCCL when every rank has its own GPU), a cuBLAS GEMM with w1 (fp32 accumulation, rounded to T),
// a SiLU kernel, a cuBLAS GEMM with w2 into a [W*R, H] partial, and one harness reduce-scatter of
// the partials over tokens into y.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "kforge/kernel.h"

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
};

template <typename T>
__global__ void SiluInPlace(T* v, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float u = static_cast<float>(v[i]);
    v[i] = static_cast<T>(u / (1.0f + __expf(-u)));
  }
}

// Row-major c[m,n] = a[m,k] @ b[k,n] is column-major c^T = b^T a^T.
cublasStatus_t Gemm(cublasHandle_t h, cudaDataType_t t, int64_t m, int64_t n, int64_t k,
                    const void* a, const void* b, void* c) {
  const float alpha = 1.0f, beta = 0.0f;
  return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                      static_cast<int>(k), &alpha, b, t, static_cast<int>(n), a, t,
                      static_cast<int>(k), &beta, c, t, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT);
}

size_t Align256(size_t b) { return (b + 255) / 256 * 256; }

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
  const kf_tensor* w1 = kf_input(ctx, "w1");
  const kf_tensor* w2 = kf_input(ctx, "w2");
  kf_tensor* y = kf_output(ctx, "y");
  if (st == nullptr || x == nullptr || w1 == nullptr || w2 == nullptr || y == nullptr) return 1;
  if (x->dtype != KF_BF16 && x->dtype != KF_F32) return 2;
  const int64_t m = x->shape[0] * ctx->world_size, h = x->shape[1], f = w1->shape[1];
  const size_t es = kf_dtype_size(x->dtype);
  // Workspace: gathered X [m, h], activations [m, f], partial output [m, h].
  const size_t xb = Align256(static_cast<size_t>(m * h) * es);
  const size_t ab = Align256(static_cast<size_t>(m * f) * es);
  if (ctx->workspace.nbytes < 2 * xb + ab) return 1;
  char* xg = static_cast<char*>(ctx->workspace.data);
  char* act = xg + xb;
  char* part = act + ab;
  const cudaDataType_t t = x->dtype == KF_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  if (kf_all_gather(ctx, x->data, xg, static_cast<size_t>(x->numel), x->dtype) != 0) return 1;
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  if (Gemm(st->handle, t, m, f, h, xg, w1->data, act) != CUBLAS_STATUS_SUCCESS) return 1;
  const int64_t n = m * f;
  const int blocks = static_cast<int>(n / 256 + 1 < 4096 ? n / 256 + 1 : 4096);
  if (x->dtype == KF_BF16)
    SiluInPlace<<<blocks, 256, 0, ctx->stream>>>(reinterpret_cast<__nv_bfloat16*>(act), n);
  else
    SiluInPlace<<<blocks, 256, 0, ctx->stream>>>(reinterpret_cast<float*>(act), n);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (Gemm(st->handle, t, m, h, f, act, w2->data, part) != CUBLAS_STATUS_SUCCESS) return 1;
  return kf_reduce_scatter(ctx, part, y->data, static_cast<size_t>(y->numel), y->dtype, KF_SUM);
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
