// All-gather + GEMM as a pipeline over the K-shards: multiply the shards already here while the
// others are still arriving.
//
//   side stream:  start barrier | pull a_{r+1} | pull a_{r+2} | ... | end barrier
//   main stream:  GEMM a_r      | GEMM a_{r+1} | GEMM a_{r+2} | ... | round to T
//
// c = X @ b = sum over shards q of a_q @ b[q*K:(q+1)*K, :], so the product needs no gathered X: the
// GEMM of this rank's own shard starts at once (it reads the input directly), and the GEMM of peer
// shard q starts as soon as a copy kernel on the side stream has pulled a_q from the peer's input
// (peer loads) into this rank's workspace. The W GEMMs accumulate into one fp32 matrix (beta = 1),
// so c is rounded once however many shards there are.
//
// Ordering: the start barrier (flag [kStart + src]) orders every pull after the peer entered this
// call, so its input holds this call's values; the end barrier (flag [kDone + src]) keeps every
// rank in the call until all peers have finished pulling its shard, so the harness never replaces
// an input a peer is still reading. Epochs grow by one per call (every rank makes the same calls).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kMaxWorld = 8;
constexpr int kStart = 0;         // pad slots [kStart + src]
constexpr int kDone = kMaxWorld;  // pad slots [kDone + src]
constexpr int kCopyBlocks = 32;
constexpr size_t kCublasWorkspace = 32u << 20;

struct Pads {
  uint32_t* p[kMaxWorld];
};

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  cudaEvent_t pulled[kMaxWorld] = {};
  uint32_t epoch = 0;
};

// Every rank meets every other at slot base + src of its pad.
__global__ void Barrier(Pads pads, int base, int rank, int world, uint32_t epoch) {
  const int q = threadIdx.x;
  if (q < world) {
    __threadfence_system();
    kf_signal(pads.p[q] + base + rank, epoch);
    kf_wait(pads.p[rank] + base + q, epoch);
  }
}

// dst[0, bytes) = src[0, bytes): 16-byte loads over the links for the bulk, bytes for the tail.
__global__ void Pull(const char* src, char* dst, size_t bytes) {
  const size_t vecs = bytes / 16;
  const size_t first = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = first; i < vecs; i += stride)
    reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  for (size_t i = vecs * 16 + first; i < bytes; i += stride) dst[i] = src[i];
}

__global__ void RoundToBf16(const float* acc, __nv_bfloat16* c, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    c[i] = __float2bfloat16_rn(acc[i]);
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size > kMaxWorld) return 1;
  if (ctx->signal_pad.nbytes < sizeof(uint32_t) * 2 * kMaxWorld) return 1;
  State* st = new State;
  ctx->user = st;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    return 1;
  if (cudaStreamCreateWithFlags(&st->side, cudaStreamNonBlocking) != cudaSuccess) return 1;
  if (cudaEventCreateWithFlags(&st->fork, cudaEventDisableTiming) != cudaSuccess) return 1;
  if (cudaEventCreateWithFlags(&st->join, cudaEventDisableTiming) != cudaSuccess) return 1;
  for (cudaEvent_t& e : st->pulled)
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor* a = kf_input(ctx, "a");
  const kf_tensor* b = kf_input(ctx, "b");
  kf_tensor* c = kf_output(ctx, "c");
  if (st == nullptr || a == nullptr || b == nullptr || c == nullptr) return 1;
  if (a->dtype != KF_BF16 && a->dtype != KF_F32) return 2;
  const int world = ctx->world_size, rank = ctx->rank;
  const int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
  const size_t es = kf_dtype_size(a->dtype);
  const bool bf16 = a->dtype == KF_BF16;
  // Workspace: one slot per shard (256-byte aligned), then the fp32 accumulator for bf16.
  const size_t slot = (static_cast<size_t>(m * k) * es + 255) / 256 * 256;
  char* slots = static_cast<char*>(ctx->workspace.data);
  float* acc = bf16 ? reinterpret_cast<float*>(slots + world * slot) : static_cast<float*>(c->data);
  if (ctx->workspace.nbytes < world * slot + (bf16 ? static_cast<size_t>(m * n) * 4 : 0)) return 1;
  const uint32_t epoch = ++st->epoch;
  Pads pads;
  for (int q = 0; q < kMaxWorld; ++q)
    pads.p[q] = q < world ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;

  // Side stream: barrier, then pull the peers' shards in ring order (spreads the load on the
  // links).
  if (cudaEventRecord(st->fork, ctx->stream) != cudaSuccess) return 1;
  if (cudaStreamWaitEvent(st->side, st->fork, 0) != cudaSuccess) return 1;
  Barrier<<<1, 32, 0, st->side>>>(pads, kStart, rank, world, epoch);
  for (int s = 1; s < world; ++s) {
    const int q = (rank + s) % world;
    Pull<<<kCopyBlocks, 256, 0, st->side>>>(static_cast<const char*>(a->peers[q]), slots + q * slot,
                                            a->nbytes);
    if (cudaEventRecord(st->pulled[s], st->side) != cudaSuccess) return 1;
  }
  Barrier<<<1, 32, 0, st->side>>>(pads, kDone, rank, world, epoch);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (cudaEventRecord(st->join, st->side) != cudaSuccess) return 1;

  // Main stream: acc (+)= a_q @ b[q*K:(q+1)*K, :], own shard first. Row-major acc = a_q @ b_q is
  // column-major acc^T = b_q^T a_q^T.
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const float alpha = 1.0f;
  for (int s = 0; s < world; ++s) {
    const int q = (rank + s) % world;
    if (s > 0 && cudaStreamWaitEvent(ctx->stream, st->pulled[s], 0) != cudaSuccess) return 1;
    const void* aq = s == 0 ? a->data : slots + q * slot;
    const void* bq = static_cast<const char*>(b->data) + static_cast<size_t>(q * k * n) * es;
    const float beta = s == 0 ? 0.0f : 1.0f;
    if (cublasGemmEx(st->handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                     static_cast<int>(k), &alpha, bq, t, static_cast<int>(n), aq, t,
                     static_cast<int>(k), &beta, acc, CUDA_R_32F, static_cast<int>(n),
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
      return 1;
  }
  if (bf16) {
    const int64_t total = m * n;
    int blocks = static_cast<int>((total + 255) / 256);
    if (blocks > 4096) blocks = 4096;
    RoundToBf16<<<blocks, 256, 0, ctx->stream>>>(acc, static_cast<__nv_bfloat16*>(c->data), total);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  return cudaStreamWaitEvent(ctx->stream, st->join, 0) == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (st->side != nullptr && cudaStreamDestroy(st->side) != cudaSuccess) rc = 1;
  if (st->fork != nullptr) cudaEventDestroy(st->fork);
  if (st->join != nullptr) cudaEventDestroy(st->join);
  for (cudaEvent_t e : st->pulled)
    if (e != nullptr) cudaEventDestroy(e);
  if (st->handle != nullptr && cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  if (st->cublas_ws != nullptr && cudaFree(st->cublas_ws) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
