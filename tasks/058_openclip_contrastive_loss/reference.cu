// SigLIP loss baseline, OpenCLIP's SigLipLoss 'bidir' algorithm (PKB #58) on the harness's
// point-to-point calls and cuBLAS:
//   1. the local loss: logits of the own images against the own texts (one GEMM, fp32 out), then
//      softplus(-y * z) summed with labels +1 on the diagonal,
//   2. (W-1)/2 rounds: send the held text shards to the left and right neighbours and receive
//      theirs (one kf_group_start/kf_group_end), then the negative-only loss of both received
//      shards; what came from the right goes on to the left next round, and vice versa,
//   3. when W-1 is odd, one last one-way step: send right, receive from the left, one more
//      negative-only loss.
// Every shard's terms are summed in fp64 per block and added to one fp64 accumulator; the loss is
// that sum / B, rounded to fp32. Everything runs on ctx->stream.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

using bf16 = __nv_bfloat16;
constexpr size_t kCublasWorkspace = 32u << 20;
constexpr int kThreads = 256;
constexpr int kMaxBlocks = 2048;

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
};

inline size_t Align256(size_t x) { return (x + 255) / 256 * 256; }

__device__ __forceinline__ float Softplus(float x) {
  return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
}

// acc += sum over the [B, B] logits dots[k, i] (= image_i . text_k) of softplus(-y * z), z =
// scale * dot + bias, with y = +1 on the diagonal when `labels` (the own shard), else -1.
__global__ void __launch_bounds__(kThreads)
    AddTerms(const float* __restrict__ dots, int64_t b, float scale, float bias, int labels,
             double* __restrict__ acc) {
  __shared__ double partial[kThreads / 32];
  double s = 0;
  const int64_t n = b * b;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float z = scale * dots[e] + bias;
    const bool positive = labels && e / b == e % b;
    s += Softplus(positive ? -z : z);
  }
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0;
    for (int w = 0; w < kThreads / 32; ++w) t += partial[w];
    atomicAdd(acc, t);
  }
}

__global__ void Finish(const double* __restrict__ acc, int64_t b, float* __restrict__ loss) {
  loss[0] = static_cast<float>(acc[0] / static_cast<double>(b));
}

// dots (column-major [B_text, B_img], i.e. row-major [img][text]) = text . image^T.
int Dots(State* st, const bf16* img, const bf16* txt, float* dots, int64_t b, int64_t d) {
  const float one = 1.0f, zero = 0.0f;
  return cublasGemmEx(st->handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(b),
                      static_cast<int>(b), static_cast<int>(d), &one, txt, CUDA_R_16BF,
                      static_cast<int>(d), img, CUDA_R_16BF, static_cast<int>(d), &zero, dots,
                      CUDA_R_32F, static_cast<int>(b), CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS
             ? 0
             : 1;
}

int ShardLoss(kf_ctx* ctx, State* st, const bf16* img, const bf16* txt, float* dots, int64_t b,
              int64_t d, float scale, float bias, int labels, double* acc) {
  if (Dots(st, img, txt, dots, b, d) != 0) return 1;
  int64_t blocks = (b * b + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  AddTerms<<<static_cast<unsigned>(blocks), kThreads, 0, ctx->stream>>>(dots, b, scale, bias,
                                                                        labels, acc);
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
  const kf_tensor* img_t = kf_input(ctx, "image_features");
  const kf_tensor* txt_t = kf_input(ctx, "text_features");
  kf_tensor* loss = kf_output(ctx, "loss");
  if (st == nullptr || img_t == nullptr || txt_t == nullptr || loss == nullptr ||
      img_t->dtype != KF_BF16 || img_t->ndim != 2)
    return 2;
  const int64_t b = img_t->shape[0], d = img_t->shape[1];
  const float scale = static_cast<float>(kf_param(ctx, "logit_scale", 10.0));
  const float bias = -static_cast<float>(kf_param(ctx, "neg_bias", 10.0));
  const int world = ctx->world_size, rank = ctx->rank;
  const int left = (rank + world - 1) % world, right = (rank + 1) % world;

  // Workspace: the fp64 accumulator, one shard's logits, two pairs of text receive buffers.
  const size_t shard = Align256(static_cast<size_t>(b * d) * sizeof(bf16));
  const size_t dots_bytes = Align256(static_cast<size_t>(b * b) * sizeof(float));
  char* ws = static_cast<char*>(ctx->workspace.data);
  if (ctx->workspace.nbytes < 256 + dots_bytes + 4 * shard) return 1;
  double* acc = reinterpret_cast<double*>(ws);
  float* dots = reinterpret_cast<float*>(ws + 256);
  bf16* recv[2][2];  // recv[pair][0]: from the right, [1]: from the left
  for (int p = 0; p < 2; ++p)
    for (int s = 0; s < 2; ++s)
      recv[p][s] = reinterpret_cast<bf16*>(ws + 256 + dots_bytes + (2 * p + s) * shard);
  const size_t count = static_cast<size_t>(b * d);

  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMemsetAsync(acc, 0, sizeof(double), ctx->stream) != cudaSuccess) return 1;
  const bf16* img = static_cast<const bf16*>(img_t->data);
  const bf16* own = static_cast<const bf16*>(txt_t->data);
  if (ShardLoss(ctx, st, img, own, dots, b, d, scale, bias, 1, acc) != 0) return 1;

  const bf16* to_left = own;
  const bf16* to_right = own;
  const int rounds = (world - 1) / 2;
  for (int i = 0; i < rounds; ++i) {
    bf16* from_right = recv[i % 2][0];
    bf16* from_left = recv[i % 2][1];
    if (kf_group_start(ctx) != 0 || kf_send(ctx, to_right, count, KF_BF16, right) != 0 ||
        kf_send(ctx, to_left, count, KF_BF16, left) != 0 ||
        kf_recv(ctx, from_right, count, KF_BF16, right) != 0 ||
        kf_recv(ctx, from_left, count, KF_BF16, left) != 0 || kf_group_end(ctx) != 0)
      return 1;
    if (ShardLoss(ctx, st, img, from_right, dots, b, d, scale, bias, 0, acc) != 0) return 1;
    if (ShardLoss(ctx, st, img, from_left, dots, b, d, scale, bias, 0, acc) != 0) return 1;
    to_left = from_right;
    to_right = from_left;
  }
  if ((world - 1) % 2 != 0) {
    bf16* from_left = recv[rounds % 2][1];
    if (kf_group_start(ctx) != 0 || kf_send(ctx, to_right, count, KF_BF16, right) != 0 ||
        kf_recv(ctx, from_left, count, KF_BF16, left) != 0 || kf_group_end(ctx) != 0)
      return 1;
    if (ShardLoss(ctx, st, img, from_left, dots, b, d, scale, bias, 0, acc) != 0) return 1;
  }
  Finish<<<1, 1, 0, ctx->stream>>>(acc, b, static_cast<float*>(loss->data));
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
