// SigLIP loss with the text shards pulled, not passed around a ring: a side stream pulls every
// peer's text features straight from its input (peer-to-peer cudaMemcpyAsync on the copy
// engines), one shard after the other, while the main stream multiplies the shards already here,
// and a third stream reduces each shard's logits while the next shard's GEMM runs.
//
//   side stream:    start barrier | pull text of r+1 | pull text of r+2 | ... | pull text of r-1
//   main stream:    GEMM own shard | wait, GEMM shard r+1 | wait, GEMM shard r+2 | ... | loss
//   reduce stream:                 | softplus sum, own   | softplus sum, r+1      | ...
//
// Against the baseline's ring (exchange, then GEMM, then reduce, (W-1)/2 + 1 times, on one
// stream): every transfer but the first runs under the GEMM of an earlier shard, no shard waits
// for a neighbour to forward it, and the memory-bound reductions overlap the compute-bound GEMMs
// (each shard has its own logits buffer). Each shard is one cuBLAS GEMM (fp32 dots) and one
// fp64-accumulated reduction of its softplus terms, as in the baseline, so both sum the same
// terms.
//
// Ordering: the start barrier orders the pulls after every peer entered this call (its inputs
// hold this call's values); no end barrier is needed: only peers' inputs are read, main waits for
// every pull and reduction before it ends, and the harness replaces inputs only after every
// rank's call.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

using bf16 = __nv_bfloat16;
constexpr int kMaxWorld = 8;
constexpr size_t kCublasWorkspace = 32u << 20;
constexpr int kThreads = 256;
constexpr int kMaxBlocks = 2048;

struct Pads {
  uint32_t* p[kMaxWorld];
};

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
  cudaStream_t side = nullptr, reduce = nullptr;
  cudaEvent_t fork = nullptr, reduced = nullptr;
  cudaEvent_t pulled[kMaxWorld] = {};
  cudaEvent_t multiplied[kMaxWorld] = {};
  uint32_t epoch = 0;
};

inline size_t Align256(size_t x) { return (x + 255) / 256 * 256; }

__device__ __forceinline__ float Softplus(float x) {
  return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
}

// Thread t signals peer t (slot `rank` of its pad) and waits for peer t's signal in slot t of
// this rank's pad.
__global__ void StartBarrier(Pads pads, int rank, int world, uint32_t epoch) {
  const int t = threadIdx.x;
  if (t < world && t != rank) {
    kf_signal(pads.p[t] + rank, epoch);
    kf_wait(pads.p[rank] + t, epoch);
  }
}

// acc += sum over the [B, B] dots (image i, text k at i * B + k) of softplus(-y * z), z = scale *
// dot + bias, y = +1 on the diagonal when `labels` (the own shard), else -1.
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

// dots (row-major [image i][text k], i.e. column-major [text, image]) = text . image^T.
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

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size > kMaxWorld || ctx->signal_pad.nbytes < kMaxWorld * sizeof(uint32_t))
    return 1;
  State* st = new State;
  ctx->user = st;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    return 1;
  if (cudaStreamCreateWithFlags(&st->side, cudaStreamNonBlocking) != cudaSuccess) return 1;
  if (cudaStreamCreateWithFlags(&st->reduce, cudaStreamNonBlocking) != cudaSuccess) return 1;
  if (cudaEventCreateWithFlags(&st->fork, cudaEventDisableTiming) != cudaSuccess) return 1;
  if (cudaEventCreateWithFlags(&st->reduced, cudaEventDisableTiming) != cudaSuccess) return 1;
  for (cudaEvent_t& e : st->pulled)
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return 1;
  for (cudaEvent_t& e : st->multiplied)
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return 1;
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

  // Workspace: the fp64 accumulator, the fp32 dots of every shard, the W - 1 pulled text shards.
  const size_t shard = Align256(txt_t->nbytes);
  const size_t dots_bytes = Align256(static_cast<size_t>(b * b) * sizeof(float));
  char* ws = static_cast<char*>(ctx->workspace.data);
  if (ctx->workspace.nbytes < 256 + world * dots_bytes + (world - 1) * shard) return 1;
  double* acc = reinterpret_cast<double*>(ws);
  auto dots = [&](int s) { return reinterpret_cast<float*>(ws + 256 + s * dots_bytes); };
  auto slot = [&](int s) {
    return reinterpret_cast<bf16*>(ws + 256 + world * dots_bytes + (s - 1) * shard);
  };

  // Side stream: barrier, then shard (rank + s) % W into slot s, s = 1 .. W-1.
  Pads pads = {};
  for (int p = 0; p < world; ++p) pads.p[p] = static_cast<uint32_t*>(ctx->signal_pad.peers[p]);
  const uint32_t epoch = ++st->epoch;
  if (cudaEventRecord(st->fork, ctx->stream) != cudaSuccess) return 1;
  if (cudaStreamWaitEvent(st->side, st->fork, 0) != cudaSuccess) return 1;
  StartBarrier<<<1, 32, 0, st->side>>>(pads, rank, world, epoch);
  if (cudaGetLastError() != cudaSuccess) return 1;
  for (int s = 1; s < world; ++s) {
    const int p = (rank + s) % world;
    if (cudaMemcpyAsync(slot(s), txt_t->peers[p], txt_t->nbytes, cudaMemcpyDeviceToDevice,
                        st->side) != cudaSuccess)
      return 1;
    if (cudaEventRecord(st->pulled[s], st->side) != cudaSuccess) return 1;
  }
  if (cudaEventRecord(st->pulled[0], st->side) != cudaSuccess) return 1;  // the side's end

  // Main stream: the GEMM of the own shard, then of each pulled shard as it lands; the reduce
  // stream sums each shard's terms once its GEMM is done (the first waits for the memset too).
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMemsetAsync(acc, 0, sizeof(double), ctx->stream) != cudaSuccess) return 1;
  const bf16* img = static_cast<const bf16*>(img_t->data);
  int64_t blocks = (b * b + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  for (int s = 0; s < world; ++s) {
    if (s > 0 && cudaStreamWaitEvent(ctx->stream, st->pulled[s], 0) != cudaSuccess) return 1;
    const bf16* txt = s == 0 ? static_cast<const bf16*>(txt_t->data) : slot(s);
    if (Dots(st, img, txt, dots(s), b, d) != 0) return 1;
    if (cudaEventRecord(st->multiplied[s], ctx->stream) != cudaSuccess) return 1;
    if (cudaStreamWaitEvent(st->reduce, st->multiplied[s], 0) != cudaSuccess) return 1;
    AddTerms<<<static_cast<unsigned>(blocks), kThreads, 0, st->reduce>>>(dots(s), b, scale, bias,
                                                                         s == 0 ? 1 : 0, acc);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  if (cudaEventRecord(st->reduced, st->reduce) != cudaSuccess) return 1;
  if (cudaStreamWaitEvent(ctx->stream, st->reduced, 0) != cudaSuccess) return 1;
  if (cudaStreamWaitEvent(ctx->stream, st->pulled[0], 0) != cudaSuccess) return 1;
  Finish<<<1, 1, 0, ctx->stream>>>(acc, b, static_cast<float*>(loss->data));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (st->side != nullptr && cudaStreamSynchronize(st->side) != cudaSuccess) rc = 1;
  if (st->reduce != nullptr && cudaStreamSynchronize(st->reduce) != cudaSuccess) rc = 1;
  if (st->handle != nullptr && cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  if (st->cublas_ws != nullptr && cudaFree(st->cublas_ws) != cudaSuccess) rc = 1;
  if (st->side != nullptr) cudaStreamDestroy(st->side);
  if (st->reduce != nullptr) cudaStreamDestroy(st->reduce);
  if (st->fork != nullptr) cudaEventDestroy(st->fork);
  if (st->reduced != nullptr) cudaEventDestroy(st->reduced);
  for (cudaEvent_t e : st->pulled)
    if (e != nullptr) cudaEventDestroy(e);
  for (cudaEvent_t e : st->multiplied)
    if (e != nullptr) cudaEventDestroy(e);
  delete st;
  ctx->user = nullptr;
  return rc;
}
