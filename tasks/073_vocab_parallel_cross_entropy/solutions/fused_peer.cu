// Vocabulary-parallel cross-entropy in one kernel: both all-reduces are done by
// peer loads of per-token partials between two per-block handshakes.
//   1. Block b takes the local max of its tokens (b, b+G, ...) into this rank's
//      workspace; handshake; it loads the W maxima of each token (all loads in
//      flight at once).
//   2. It shifts its tokens' logits in place, takes the fp32 sum of exp and the
//      predicted logit into the workspace; handshake; it loads the W partials
//      of each token and writes the loss.
// Tokens go to blocks the same way on every rank (the grid depends only on W
// and the GPU), so block b reads only partials that block b of each peer wrote
// before signalling. The partials are double-buffered by epoch parity: a rank
// rewrites call n's buffers in call n+2 only after every peer signalled in
// call n+1, which a peer does after its call-n reads.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

struct PeerFloats {
  float* p[KF_MAX_RANKS];
};
struct PeerPads {
  uint32_t* p[KF_MAX_RANKS];
};

struct State {
  uint32_t* epochs = nullptr;  // barrier epochs per block (two per call)
  int blocks = 0;
};

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename Op>
__device__ float BlockReduce(float v, Op op) {
  __shared__ float partial[kThreads / 32];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = partial[0];
    for (int i = 1; i < kThreads / 32; ++i) s = op(s, partial[i]);
    total = s;
  }
  __syncthreads();
  const float t = total;
  __syncthreads();
  return t;
}

struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};

__device__ __forceinline__ void BlockBarrier(const PeerPads& pads, int rank, int world,
                                             uint32_t epoch) {
  __syncthreads();
  const int peer = threadIdx.x;
  if (peer < world && peer != rank) {
    kf_signal(pads.p[peer] + blockIdx.x * world + rank, epoch);
    kf_wait(pads.p[rank] + blockIdx.x * world + peer, epoch);
  }
  __syncthreads();
}

// Workspace (floats), per parity: max[rows], sum[rows], pred[rows]; then this
// rank's own scratch: gmax[rows], loss terms.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    FusedCrossEntropy(T* logits, const int64_t* target, T* loss, int64_t rows, int64_t vl,
                      int64_t lo, PeerFloats ws, PeerPads pads, uint32_t* epochs, int rank,
                      int world) {
  __shared__ uint32_t epoch_sh;
  __shared__ float pred_sh;
  if (threadIdx.x == 0) epoch_sh = epochs[blockIdx.x];
  __syncthreads();
  const uint32_t e0 = epoch_sh;  // this call uses epochs e0+1 and e0+2
  const int64_t base = ((e0 / 2) & 1) * 3 * rows;
  float* mine = ws.p[rank] + base;
  float* gmax = ws.p[rank] + 6 * rows;  // local scratch, never read by peers
  const int64_t g = gridDim.x;

  for (int64_t row = blockIdx.x; row < rows; row += g) {
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < vl; c += kThreads)
      m = fmaxf(m, ToFloat(logits[row * vl + c]));
    m = BlockReduce(m, Max());
    if (threadIdx.x == 0) mine[row] = m;
  }
  BlockBarrier(pads, rank, world, e0 + 1);
  for (int64_t k = threadIdx.x;; k += kThreads) {
    const int64_t row = blockIdx.x + k * g;
    if (row >= rows) break;
    float m = -INFINITY;
    for (int p = 0; p < world; ++p) m = fmaxf(m, ws.p[p][base + row]);
    gmax[row] = m;
  }
  __syncthreads();

  for (int64_t row = blockIdx.x; row < rows; row += g) {
    const float m = gmax[row];
    T* x = logits + row * vl;
    if (threadIdx.x == 0) {
      const int64_t t = target[row] - lo;
      pred_sh = t >= 0 && t < vl ? ToFloat(x[t]) - m : 0.f;
    }
    __syncthreads();  // pred is read before anyone shifts x[t]
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < vl; c += kThreads) {
      const float v = ToFloat(x[c]) - m;
      x[c] = FromFloat<T>(v);
      s += expf(v);
    }
    s = BlockReduce(s, Sum());
    if (threadIdx.x == 0) {
      mine[rows + row] = s;
      mine[2 * rows + row] = pred_sh;
    }
  }
  BlockBarrier(pads, rank, world, e0 + 2);
  for (int64_t k = threadIdx.x;; k += kThreads) {
    const int64_t row = blockIdx.x + k * g;
    if (row >= rows) break;
    float s = 0.f, pred = 0.f;
    for (int p = 0; p < world; ++p) {
      s += ws.p[p][base + rows + row];
      pred += ws.p[p][base + 2 * rows + row];
    }
    loss[row] = FromFloat<T>(logf(s) - pred);
  }
  if (threadIdx.x == 0) epochs[blockIdx.x] = e0 + 2;
}

template <typename T>
int Run(kf_ctx* ctx, const State* st) {
  kf_tensor* logits = kf_input(ctx, "logits");
  const kf_tensor* target = kf_input(ctx, "target");
  kf_tensor* loss = kf_output(ctx, "loss");
  if (!logits || !target || !loss || logits->ndim != 3) return 1;
  const int64_t rows = logits->shape[0] * logits->shape[1], vl = logits->shape[2];
  if (ctx->workspace.nbytes < 7 * rows * sizeof(float)) return 1;
  PeerFloats ws;
  PeerPads pads;
  for (int q = 0; q < KF_MAX_RANKS; ++q) {
    ws.p[q] = q < ctx->world_size ? static_cast<float*>(ctx->workspace.peers[q]) : nullptr;
    pads.p[q] = q < ctx->world_size ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
  }
  FusedCrossEntropy<T><<<st->blocks, kThreads, 0, ctx->stream>>>(
      static_cast<T*>(logits->data), static_cast<const int64_t*>(target->data),
      static_cast<T*>(loss->data), rows, vl, static_cast<int64_t>(ctx->rank) * vl, ws, pads,
      st->epochs, ctx->rank, ctx->world_size);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size > kThreads) return 1;
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  // Same grid on every rank; when ranks share one GPU all grids must be resident.
  int blocks = ctx->emulated ? sms / (2 * ctx->world_size) : 2 * sms;
  if (blocks < 1) blocks = 1;
  const size_t pad_blocks = ctx->signal_pad.nbytes / (sizeof(uint32_t) * ctx->world_size);
  if (static_cast<size_t>(blocks) > pad_blocks) blocks = static_cast<int>(pad_blocks);
  State* st = new State;
  st->blocks = blocks;
  if (cudaMalloc(&st->epochs, sizeof(uint32_t) * blocks) != cudaSuccess ||
      cudaMemsetAsync(st->epochs, 0, sizeof(uint32_t) * blocks, ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
    cudaFree(st->epochs);
    delete st;
    return 1;
  }
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  const State* st = static_cast<const State*>(ctx->user);
  if (st == nullptr) return 1;
  switch (ctx->inputs[0].dtype) {
    case KF_BF16:
      return Run<__nv_bfloat16>(ctx, st);
    case KF_F32:
      return Run<float>(ctx, st);
    default:
      return 2;
  }
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (cudaFree(st->epochs) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
