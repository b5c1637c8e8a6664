// Importance-sampling loss baseline: the LM head with cuBLAS (bf16 inputs, fp32
// accumulation and fp32 logits) over chunks of up to 256 tokens into the
// workspace; one block per token row for logsumexp, the label logit and the
// per-token ratio terms, with per-rank sums and extrema gathered by atomics;
// two harness all-reduces (5 sums; max of [max ratio, -min ratio]; NCCL on
// real GPUs) where PKB issues seven; a one-thread kernel for the loss and the
// metrics.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 256;
constexpr size_t kCublasWorkspace = 32u << 20;
constexpr float kClamp = 20.f;

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
};

// Layout of the per-rank accumulators after the logits chunk in the workspace:
// sums[5] = {n_valid, pg, ratio, k3, ce}, ext[2] = {max ratio, -min ratio}.
struct Acc {
  float sums[5];
  float ext[2];
};

__device__ void AtomicMaxF(float* a, float v) {
  int* ai = reinterpret_cast<int*>(a);
  int old = *ai;
  while (v > __int_as_float(old)) {
    const int assumed = old;
    old = atomicCAS(ai, assumed, __float_as_int(v));
    if (old == assumed) break;
  }
}

__global__ void InitAcc(Acc* acc) {
  for (int i = 0; i < 5; ++i) acc->sums[i] = 0.f;
  acc->ext[0] = acc->ext[1] = -INFINITY;
}

// Block reduction of (max, sum) pairs is done in two passes for clarity.
__device__ float BlockReduce(float v, bool is_max, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, u) : v + u;
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = is_max ? -INFINITY : 0.f;
  for (int w = 0; w < kThreads / 32; ++w) r = is_max ? fmaxf(r, scratch[w]) : r + scratch[w];
  return r;
}

// One block per token of the chunk; logits[row * vocab + j] is fp32.
__global__ void __launch_bounds__(kThreads)
    TokenTerms(const float* logits, int64_t vocab, int64_t t0, const int64_t* labels,
               const __nv_bfloat16* old_lp, const __nv_bfloat16* adv, int64_t ignore, float* lp_out,
               float* pg_out, Acc* acc) {
  __shared__ float scratch[kThreads / 32];
  const int64_t t = t0 + blockIdx.x;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const int64_t label = labels[t];
  const bool valid = label != ignore;
  float ce = 0.f;
  if (valid) {
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) mx = fmaxf(mx, row[j]);
    mx = BlockReduce(mx, true, scratch);
    float z = 0.f;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) z += __expf(row[j] - mx);
    z = BlockReduce(z, false, scratch);
    ce = mx + logf(z) - row[label];
  }
  if (threadIdx.x != 0) return;
  const float lp = -ce;
  const float delta = valid ? fminf(fmaxf(lp - __bfloat162float(old_lp[t]), -kClamp), kClamp) : 0.f;
  const float ratio = expf(delta);
  const float pg = valid ? -ratio * __bfloat162float(adv[t]) : 0.f;
  lp_out[t] = lp;
  pg_out[t] = pg;
  if (!valid) return;
  atomicAdd(&acc->sums[0], 1.f);
  atomicAdd(&acc->sums[1], pg);
  atomicAdd(&acc->sums[2], ratio);
  atomicAdd(&acc->sums[3], ratio - delta - 1.f);
  atomicAdd(&acc->sums[4], ce);
  AtomicMaxF(&acc->ext[0], ratio);
  AtomicMaxF(&acc->ext[1], -ratio);
}

__global__ void Finish(const Acc* acc, float* loss, float* metrics) {
  const float n = fmaxf(acc->sums[0], 1.f);
  *loss = acc->sums[1] / n;
  metrics[0] = acc->sums[2] / n;
  metrics[1] = -acc->ext[1];
  metrics[2] = acc->ext[0];
  metrics[3] = acc->sums[3] / n;
  metrics[4] = acc->sums[4] / n;
}

size_t AccOffset(int64_t tokens, int64_t vocab) {
  const int64_t rows = tokens < kChunk ? tokens : kChunk;
  return (static_cast<size_t>(rows * vocab) * sizeof(float) + 255) & ~size_t{255};
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const char* ins[] = {"hidden_states", "weight", "labels", "old_logprobs", "advantages"};
  const char* outs[] = {"loss", "per_token_logprobs", "per_token_loss", "metrics"};
  for (const char* n : ins)
    if (kf_input(ctx, n) == nullptr) return 1;
  for (const char* n : outs)
    if (kf_output(ctx, n) == nullptr) return 1;
  const kf_tensor* h = kf_input(ctx, "hidden_states");
  const kf_tensor* w = kf_input(ctx, "weight");
  if (h->dtype != KF_BF16 || w->dtype != KF_BF16 || h->shape[1] != w->shape[1]) return 1;
  if (ctx->workspace.nbytes < AccOffset(h->shape[0], w->shape[0]) + sizeof(Acc)) return 1;
  State* st = new State;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) {
    delete st;
    return 1;
  }
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess ||
      cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(st->handle);
    cudaFree(st->cublas_ws);
    delete st;
    return 1;
  }
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 1;
  const kf_tensor& h = *kf_input(ctx, "hidden_states");
  const kf_tensor& w = *kf_input(ctx, "weight");
  const int64_t tokens = h.shape[0], hidden = h.shape[1], vocab = w.shape[0];
  const int64_t ignore = static_cast<int64_t>(kf_param(ctx, "ignore_index", -100));
  float* logits = static_cast<float*>(ctx->workspace.data);
  Acc* acc =
      reinterpret_cast<Acc*>(static_cast<char*>(ctx->workspace.data) + AccOffset(tokens, vocab));
  float* lp = static_cast<float*>(kf_output(ctx, "per_token_logprobs")->data);
  float* pg = static_cast<float*>(kf_output(ctx, "per_token_loss")->data);
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  InitAcc<<<1, 1, 0, ctx->stream>>>(acc);
  const float one = 1.f, zero = 0.f;
  for (int64_t t0 = 0; t0 < tokens; t0 += kChunk) {
    const int64_t rows = tokens - t0 < kChunk ? tokens - t0 : kChunk;
    // Row-major logits[rows, V] = h[rows, H] . W[V, H]^T is, column-major,
    // logits^T[V, rows] = W^T(op T of the [H, V] col-major view) . h^T.
    if (cublasGemmEx(st->handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(vocab),
                     static_cast<int>(rows), static_cast<int>(hidden), &one, w.data, CUDA_R_16BF,
                     static_cast<int>(hidden),
                     static_cast<const __nv_bfloat16*>(h.data) + t0 * hidden, CUDA_R_16BF,
                     static_cast<int>(hidden), &zero, logits, CUDA_R_32F, static_cast<int>(vocab),
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
      return 1;
    TokenTerms<<<static_cast<unsigned>(rows), kThreads, 0, ctx->stream>>>(
        logits, vocab, t0, static_cast<const int64_t*>(kf_input(ctx, "labels")->data),
        static_cast<const __nv_bfloat16*>(kf_input(ctx, "old_logprobs")->data),
        static_cast<const __nv_bfloat16*>(kf_input(ctx, "advantages")->data), ignore, lp, pg, acc);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  if (kf_all_reduce(ctx, acc->sums, acc->sums, 5, KF_F32, KF_SUM) != 0) return 1;
  if (kf_all_reduce(ctx, acc->ext, acc->ext, 2, KF_F32, KF_MAX) != 0) return 1;
  Finish<<<1, 1, 0, ctx->stream>>>(acc, static_cast<float*>(kf_output(ctx, "loss")->data),
                                   static_cast<float*>(kf_output(ctx, "metrics")->data));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  if (cudaFree(st->cublas_ws) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
