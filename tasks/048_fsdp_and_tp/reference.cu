// 2-D FSDP x TP SwiGLU baseline, as torchtitan runs it: harness all-gathers of the three weight
// shards over the "fsdp" group (NCCL communicators split from the world when every rank has its own
// GPU), two cuBLAS GEMMs x @ W1_t and x @ W2_t (fp32 accumulation, rounded to T), a SwiGLU kernel,
// the GEMM with W3_t (one GEMM per gathered column block of W3, written side by side, so that W3
// needs no re-layout), and a harness all-reduce of the partials over the "tp" group.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "kforge/kernel.h"

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
};

// u1 = silu(u1) * u2.
template <typename T>
__global__ void SwiGlu(T* u1, const T* u2, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = static_cast<float>(u1[i]);
    u1[i] = static_cast<T>(g / (1.0f + __expf(-g)) * static_cast<float>(u2[i]));
  }
}

// Row-major c[m,n] (leading dimension ldc) = a[m,k] @ b[k,n] is column-major c^T = b^T a^T.
cublasStatus_t Gemm(cublasHandle_t h, cudaDataType_t t, int64_t m, int64_t n, int64_t k,
                    const void* a, const void* b, void* c, int64_t ldc) {
  const float alpha = 1.0f, beta = 0.0f;
  return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                      static_cast<int>(k), &alpha, b, t, static_cast<int>(n), a, t,
                      static_cast<int>(k), &beta, c, t, static_cast<int>(ldc), CUBLAS_COMPUTE_32F,
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
  const kf_tensor* w3 = kf_input(ctx, "w3");
  kf_tensor* y = kf_output(ctx, "y");
  const int tp = kf_group_index(ctx, "tp"), fsdp = kf_group_index(ctx, "fsdp");
  if (st == nullptr || x == nullptr || w1 == nullptr || w2 == nullptr || w3 == nullptr ||
      y == nullptr || tp < 0 || fsdp < 0)
    return 1;
  if (x->dtype != KF_BF16 && x->dtype != KF_F32) return 2;
  const kf_dtype dt = x->dtype;
  const int n_f = ctx->groups[fsdp].size;
  const int64_t b = x->shape[0], d = x->shape[1], fl = w1->shape[1], dc = w3->shape[1];
  const size_t es = kf_dtype_size(dt);
  // Workspace: W1_t [D, Fl], W2_t [D, Fl], W3_t's blocks [n_f, Fl, D/n_f], u1, u2 [B, Fl], partial.
  const size_t wb = Align256(static_cast<size_t>(d * fl) * es);
  const size_t ub = Align256(static_cast<size_t>(b * fl) * es);
  if (ctx->workspace.nbytes < 3 * wb + 2 * ub + static_cast<size_t>(b * d) * es) return 1;
  char* g1 = static_cast<char*>(ctx->workspace.data);
  char* g2 = g1 + wb;
  char* g3 = g2 + wb;
  char* u1 = g3 + wb;
  char* u2 = u1 + ub;
  char* part = u2 + ub;
  if (kf_group_all_gather(ctx, fsdp, w1->data, g1, static_cast<size_t>(w1->numel), dt) != 0 ||
      kf_group_all_gather(ctx, fsdp, w2->data, g2, static_cast<size_t>(w2->numel), dt) != 0 ||
      kf_group_all_gather(ctx, fsdp, w3->data, g3, static_cast<size_t>(w3->numel), dt) != 0)
    return 1;
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  const cudaDataType_t t = dt == KF_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  if (Gemm(st->handle, t, b, fl, d, x->data, g1, u1, fl) != CUBLAS_STATUS_SUCCESS ||
      Gemm(st->handle, t, b, fl, d, x->data, g2, u2, fl) != CUBLAS_STATUS_SUCCESS)
    return 1;
  const int64_t n = b * fl;
  const int blocks = static_cast<int>(n / 256 + 1 < 4096 ? n / 256 + 1 : 4096);
  if (dt == KF_BF16)
    SwiGlu<<<blocks, 256, 0, ctx->stream>>>(reinterpret_cast<__nv_bfloat16*>(u1),
                                            reinterpret_cast<const __nv_bfloat16*>(u2), n);
  else
    SwiGlu<<<blocks, 256, 0, ctx->stream>>>(reinterpret_cast<float*>(u1),
                                            reinterpret_cast<const float*>(u2), n);
  if (cudaGetLastError() != cudaSuccess) return 1;
  // part[:, f*dc:(f+1)*dc] = z @ (FSDP rank f's block of W3_t).
  for (int f = 0; f < n_f; ++f) {
    if (Gemm(st->handle, t, b, dc, fl, u1, g3 + static_cast<size_t>(f * fl * dc) * es,
             part + static_cast<size_t>(f * dc) * es, d) != CUBLAS_STATUS_SUCCESS)
      return 1;
  }
  return kf_group_all_reduce(ctx, tp, part, y->data, static_cast<size_t>(y->numel), dt, KF_SUM);
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
