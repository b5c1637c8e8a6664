// Vocab-parallel LM-head baseline, as torch runs PKB's reference: one cuBLAS GEMM h @ w^T (fp32
// accumulation) into the workspace, a kernel adding the bias, one harness all-gather (NCCL when
// every rank has its own GPU) into [W, B, V], and, for more than one token, a copy kernel laying
// the blocks side by side as logits[B, W*V] (torch.cat on dim 1).
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
__global__ void AddBias(T* local, const T* bias, int64_t tokens, int64_t v) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < tokens * v;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    local[e] = static_cast<T>(static_cast<float>(local[e]) + static_cast<float>(bias[e % v]));
}

// logits[t, q*v + j] = gathered[q, t, j].
template <typename T>
__global__ void Interleave(const T* gathered, T* logits, int64_t tokens, int64_t v, int world) {
  const int64_t vt = v * world;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < tokens * vt;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / vt, col = e % vt;
    logits[e] = gathered[(col / v) * tokens * v + t * v + col % v];
  }
}

int Blocks(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return static_cast<int>(b < 1 ? 1 : (b > 4096 ? 4096 : b));
}

template <typename T>
int Finish(kf_ctx* ctx, T* local, const T* bias, T* gathered, T* logits, int64_t tokens,
           int64_t v) {
  AddBias<<<Blocks(tokens * v), 256, 0, ctx->stream>>>(local, bias, tokens, v);
  if (cudaGetLastError() != cudaSuccess) return 1;
  const kf_dtype dt = sizeof(T) == 2 ? KF_BF16 : KF_F32;
  // One token: the gathered [W, 1, V] already is logits[1, W*V].
  T* dst = tokens == 1 ? logits : gathered;
  if (kf_all_gather(ctx, local, dst, static_cast<size_t>(tokens * v), dt) != 0) return 1;
  if (tokens == 1) return 0;
  Interleave<<<Blocks(tokens * v * ctx->world_size), 256, 0, ctx->stream>>>(
      gathered, logits, tokens, v, ctx->world_size);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
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
  const kf_tensor* h = kf_input(ctx, "h");
  const kf_tensor* w = kf_input(ctx, "w");
  const kf_tensor* bias = kf_input(ctx, "bias");
  kf_tensor* logits = kf_output(ctx, "logits");
  if (st == nullptr || h == nullptr || w == nullptr || bias == nullptr || logits == nullptr)
    return 1;
  if (h->dtype != KF_BF16 && h->dtype != KF_F32) return 2;
  const int64_t tokens = h->shape[0], hid = h->shape[1], v = w->shape[0];
  const size_t es = kf_dtype_size(h->dtype);
  const size_t block = (static_cast<size_t>(tokens * v) * es + 255) / 256 * 256;
  if (ctx->workspace.nbytes < block + static_cast<size_t>(ctx->world_size * tokens * v) * es)
    return 1;
  char* local = static_cast<char*>(ctx->workspace.data);
  char* gathered = local + block;
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  // Row-major local[B, V] = h[B, H] @ w[V, H]^T is column-major local^T = w h^T, where the
  // row-major w is column-major [H, V] (so op T) and the row-major h is column-major [H, B].
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t t = h->dtype == KF_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  if (cublasGemmEx(st->handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(v),
                   static_cast<int>(tokens), static_cast<int>(hid), &alpha, w->data, t,
                   static_cast<int>(hid), h->data, t, static_cast<int>(hid), &beta, local, t,
                   static_cast<int>(v), CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
    return 1;
  if (h->dtype == KF_BF16)
    return Finish(ctx, reinterpret_cast<__nv_bfloat16*>(local),
                  static_cast<const __nv_bfloat16*>(bias->data),
                  reinterpret_cast<__nv_bfloat16*>(gathered),
                  static_cast<__nv_bfloat16*>(logits->data), tokens, v);
  return Finish(ctx, reinterpret_cast<float*>(local), static_cast<const float*>(bias->data),
                reinterpret_cast<float*>(gathered), static_cast<float*>(logits->data), tokens, v);
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
