// 2-D FSDP x TP SwiGLU with the FSDP weight gathers hidden behind the first GEMMs and the TP
// all-reduce behind the last ones.
//
//   pull stream:    start barrier | pull the w1, w2, w3 shards of FSDP peer 1 | peer 2 | ...
//   main stream:    u += x[:, own D block] @ w1/w2 shard | ... per FSDP shard as it lands
//                   | SwiGLU | part[:, block j] = z @ w3 shard j, signal TP peers | ...
//   reduce stream:                      y[:, block j] = sum over the TP group of part[:, block j]
//
// x @ W1_t = sum over FSDP ranks j of x[:, j*D/n_f:(j+1)*D/n_f] @ w1_j, so no gathered W1_t is
// needed: the GEMMs of this rank's own shards start at once, each peer shard's GEMMs as soon as a
// copy kernel has pulled it from the peer (peer loads), accumulating in fp32 (one rounding of z).
// The W3 GEMM is split the same way, by column blocks of y; after block j of this rank's partial is
// written, the TP peers are told (flag [kPart + j*8 + rank]) and each rank sums block j of the TP
// group's partials (peer loads, fp32) into its y while the next block is computed.
//
// Ordering: the start barrier (flag [kStart + src]) orders every pull after the peer entered this
// call; a partial block is flagged only after the GEMM that wrote it (stream order); the end
// barrier (flag [kDone + src]) keeps every rank in the call until all peers have finished reading
// its shards and partials. Epochs grow by one per call (every rank makes the same calls).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kMaxWorld = 8;
constexpr int kThreads = 256;
constexpr int kStart = 0;             // pad slots [kStart + src]
constexpr int kDone = kMaxWorld;      // pad slots [kDone + src]
constexpr int kPart = 2 * kMaxWorld;  // pad slots [kPart + block * 8 + src]
constexpr int kCopyBlocks = 32;
constexpr size_t kCublasWorkspace = 32u << 20;

struct Ptrs {
  char* p[kMaxWorld];
};
struct Pads {
  uint32_t* p[kMaxWorld];
};

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
  cudaStream_t pull = nullptr, reduce = nullptr;
  cudaEvent_t fork = nullptr, pulls_done = nullptr, join = nullptr;
  cudaEvent_t pulled[kMaxWorld] = {}, part_ready[kMaxWorld] = {};
  uint32_t epoch = 0;
  int blocks = 1;
};

template <typename T>
__device__ float ToF(T v) {
  return static_cast<float>(v);
}

__global__ void Barrier(Pads pads, int base, int rank, int world, uint32_t epoch) {
  const int q = threadIdx.x;
  if (q < world) {
    __threadfence_system();
    kf_signal(pads.p[q] + base + rank, epoch);
    kf_wait(pads.p[rank] + base + q, epoch);
  }
}

// Tells every TP peer (world ranks tp[i]) that partial block `block` of this rank is written.
__global__ void SignalPart(Pads pads, int tp0, int tp_size, int block, int rank, uint32_t epoch) {
  const int i = threadIdx.x;
  if (i < tp_size) {
    __threadfence_system();
    kf_signal(pads.p[tp0 + i] + kPart + block * 8 + rank, epoch);
  }
}

__global__ void Pull(const char* src, char* dst, size_t bytes) {
  const size_t vecs = bytes / 16;
  const size_t first = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = first; i < vecs; i += stride)
    reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  for (size_t i = vecs * 16 + first; i < bytes; i += stride) dst[i] = src[i];
}

// z = silu(u1) * u2, from fp32 accumulators, rounded once to T.
template <typename T>
__global__ void SwiGlu(const float* u1, const float* u2, T* z, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = u1[i];
    z[i] = static_cast<T>(g / (1.0f + __expf(-g)) * u2[i]);
  }
}

// y[:, c0:c0+w] = sum over the TP group (world ranks tp0 .. tp0 + tp_size - 1) of their partials,
// once every one of them has flagged block `block`.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ReduceBlock(Ptrs part, T* y, Pads pads, int tp0, int tp_size, int rank, int block,
                uint32_t epoch, int64_t rows, int64_t d, int64_t c0, int64_t w) {
  if (threadIdx.x < tp_size) kf_wait(pads.p[rank] + kPart + block * 8 + tp0 + threadIdx.x, epoch);
  __syncthreads();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < rows * w;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t off = (e / w) * d + c0 + e % w;
    float acc = 0.f;
    for (int i = 0; i < tp_size; ++i) acc += ToF(reinterpret_cast<const T*>(part.p[tp0 + i])[off]);
    y[off] = static_cast<T>(acc);
  }
}

size_t Align256(size_t b) { return (b + 255) / 256 * 256; }

int Blocks(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return static_cast<int>(b < 1 ? 1 : (b > 4096 ? 4096 : b));
}

template <typename T>
int Run(kf_ctx* ctx, State* st, int tp, int fsdp) {
  const kf_tensor& x = *kf_input(ctx, "x");
  const kf_tensor* w[3] = {kf_input(ctx, "w1"), kf_input(ctx, "w2"), kf_input(ctx, "w3")};
  const kf_tensor& y = *kf_output(ctx, "y");
  const kf_group& gt = ctx->groups[tp];
  const kf_group& gf = ctx->groups[fsdp];
  const int world = ctx->world_size, rank = ctx->rank, n_f = gf.size;
  const int64_t b = x.shape[0], d = x.shape[1], fl = w[0]->shape[1], dc = w[2]->shape[1];
  // The TP group is contiguous: world ranks tp0 .. tp0 + size - 1.
  const int tp0 = gt.ranks[0];
  const cudaDataType_t t = x.dtype == KF_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  // Workspace: pulled shards [n_f][3] (own slots unused), u1, u2 (fp32), z (T), partial [B, D].
  const size_t ss = Align256(static_cast<size_t>(dc * fl) * sizeof(T));
  const size_t us = Align256(static_cast<size_t>(b * fl) * sizeof(float));
  const size_t zs = Align256(static_cast<size_t>(b * fl) * sizeof(T));
  char* ws = static_cast<char*>(ctx->workspace.data);
  char* shards = ws;
  float* u1 = reinterpret_cast<float*>(ws + 3 * n_f * ss);
  float* u2 = reinterpret_cast<float*>(ws + 3 * n_f * ss + us);
  T* z = reinterpret_cast<T*>(ws + 3 * n_f * ss + 2 * us);
  const size_t part_offset = 3 * n_f * ss + 2 * us + zs;
  char* part = ws + part_offset;
  if (ctx->workspace.nbytes < part_offset + static_cast<size_t>(b * d) * sizeof(T)) return 1;
  if (n_f > kMaxWorld) return 1;
  const uint32_t epoch = ++st->epoch;
  Ptrs parts;
  Pads pads;
  for (int q = 0; q < kMaxWorld; ++q) {
    parts.p[q] = q < world ? static_cast<char*>(ctx->workspace.peers[q]) + part_offset : nullptr;
    pads.p[q] = q < world ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
  }
  auto shard = [&](int j, int which) { return shards + (j * 3 + which) * ss; };

  if (cudaEventRecord(st->fork, ctx->stream) != cudaSuccess) return 1;
  if (cudaStreamWaitEvent(st->pull, st->fork, 0) != cudaSuccess) return 1;
  if (cudaStreamWaitEvent(st->reduce, st->fork, 0) != cudaSuccess) return 1;
  Barrier<<<1, 32, 0, st->pull>>>(pads, kStart, rank, world, epoch);
  for (int s = 1; s < n_f; ++s) {
    const int j = (gf.rank + s) % n_f;
    for (int which = 0; which < 3; ++which)
      Pull<<<kCopyBlocks, 256, 0, st->pull>>>(
          static_cast<const char*>(w[which]->peers[gf.ranks[j]]), shard(j, which),
          w[which]->nbytes);
    if (cudaEventRecord(st->pulled[s], st->pull) != cudaSuccess) return 1;
  }
  if (cudaEventRecord(st->pulls_done, st->pull) != cudaSuccess) return 1;

  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  const float alpha = 1.0f, zero = 0.0f, one = 1.0f;
  const size_t es = sizeof(T);
  // u (+)= x[:, j*dc:(j+1)*dc] @ shard_j: row-major [B, Fl] = [B, dc] (leading dimension D) @
  // [dc, Fl], i.e. column-major u^T = shard^T x_j^T.
  for (int s = 0; s < n_f; ++s) {
    const int j = (gf.rank + s) % n_f;
    if (s > 0 && cudaStreamWaitEvent(ctx->stream, st->pulled[s], 0) != cudaSuccess) return 1;
    const char* xj = static_cast<const char*>(x.data) + j * dc * es;
    for (int which = 0; which < 2; ++which) {
      const void* wj = s == 0 ? w[which]->data : shard(j, which);
      if (cublasGemmEx(st->handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(fl),
                       static_cast<int>(b), static_cast<int>(dc), &alpha, wj, t,
                       static_cast<int>(fl), xj, t, static_cast<int>(d), s == 0 ? &zero : &one,
                       which == 0 ? u1 : u2, CUDA_R_32F, static_cast<int>(fl), CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
        return 1;
    }
  }
  SwiGlu<T><<<Blocks(b * fl), 256, 0, ctx->stream>>>(u1, u2, z, b * fl);
  if (cudaGetLastError() != cudaSuccess) return 1;
  // part[:, j*dc:(j+1)*dc] = z @ w3 shard j, then the TP reduction of that column block.
  for (int j = 0; j < n_f; ++j) {
    const void* w3j = j == gf.rank ? w[2]->data : shard(j, 2);
    if (cublasGemmEx(st->handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(dc),
                     static_cast<int>(b), static_cast<int>(fl), &alpha, w3j, t,
                     static_cast<int>(dc), z, t, static_cast<int>(fl), &zero, part + j * dc * es, t,
                     static_cast<int>(d), CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
      return 1;
    SignalPart<<<1, 32, 0, ctx->stream>>>(pads, tp0, gt.size, j, rank, epoch);
    if (cudaEventRecord(st->part_ready[j], ctx->stream) != cudaSuccess) return 1;
    if (cudaStreamWaitEvent(st->reduce, st->part_ready[j], 0) != cudaSuccess) return 1;
    ReduceBlock<T><<<st->blocks, kThreads, 0, st->reduce>>>(
        parts, static_cast<T*>(y.data), pads, tp0, gt.size, rank, j, epoch, b, d, j * dc, dc);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  if (cudaStreamWaitEvent(st->reduce, st->pulls_done, 0) != cudaSuccess) return 1;
  Barrier<<<1, 32, 0, st->reduce>>>(pads, kDone, rank, world, epoch);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (cudaEventRecord(st->join, st->reduce) != cudaSuccess) return 1;
  return cudaStreamWaitEvent(ctx->stream, st->join, 0) == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size > kMaxWorld) return 1;
  if (ctx->signal_pad.nbytes < sizeof(uint32_t) * (kPart + 8 * kMaxWorld)) return 1;
  State* st = new State;
  ctx->user = st;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    return 1;
  if (cudaStreamCreateWithFlags(&st->pull, cudaStreamNonBlocking) != cudaSuccess) return 1;
  if (cudaStreamCreateWithFlags(&st->reduce, cudaStreamNonBlocking) != cudaSuccess) return 1;
  for (cudaEvent_t* e : {&st->fork, &st->pulls_done, &st->join})
    if (cudaEventCreateWithFlags(e, cudaEventDisableTiming) != cudaSuccess) return 1;
  for (int i = 0; i < kMaxWorld; ++i)
    if (cudaEventCreateWithFlags(&st->pulled[i], cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&st->part_ready[i], cudaEventDisableTiming) != cudaSuccess)
      return 1;
  // The spinning reduce blocks must leave SMs for the GEMMs, of every rank when ranks share a GPU.
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  st->blocks = sms / (ctx->emulated ? 2 * ctx->world_size : 4);
  if (st->blocks < 1) st->blocks = 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const int tp = kf_group_index(ctx, "tp"), fsdp = kf_group_index(ctx, "fsdp");
  if (st == nullptr || tp < 0 || fsdp < 0 || kf_input(ctx, "x") == nullptr ||
      kf_input(ctx, "w1") == nullptr || kf_input(ctx, "w2") == nullptr ||
      kf_input(ctx, "w3") == nullptr || kf_output(ctx, "y") == nullptr)
    return 1;
  switch (kf_input(ctx, "x")->dtype) {
    case KF_BF16:
      return Run<__nv_bfloat16>(ctx, st, tp, fsdp);
    case KF_F32:
      return Run<float>(ctx, st, tp, fsdp);
    default:
      return 2;
  }
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (st->pull != nullptr && cudaStreamDestroy(st->pull) != cudaSuccess) rc = 1;
  if (st->reduce != nullptr && cudaStreamDestroy(st->reduce) != cudaSuccess) rc = 1;
  for (cudaEvent_t e : {st->fork, st->pulls_done, st->join})
    if (e != nullptr) cudaEventDestroy(e);
  for (int i = 0; i < kMaxWorld; ++i) {
    if (st->pulled[i] != nullptr) cudaEventDestroy(st->pulled[i]);
    if (st->part_ready[i] != nullptr) cudaEventDestroy(st->part_ready[i]);
  }
  if (st->handle != nullptr && cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  if (st->cublas_ws != nullptr && cudaFree(st->cublas_ws) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
