// RoPE + sequence all-gather in one kernel: every rank pulls the raw q/k shards
// and rotary tables of every peer over NVLink and rotates them on arrival,
// writing straight into the [B, W*S, NH, D] outputs: no rotated copy in HBM,
// no separate collective and no reorder pass. The tables add only 1/NH to the
// bytes moved. A per-block start handshake (signal pad, per-block epochs)
// orders the peer reads after every peer has entered the call, as
// tasks/001_allreduce's one-shot does; nothing a peer reads is written here.
// Each thread handles a pair (d, d + D/2), which share their two loads.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

struct PeerPtrs {
  const void* p[KF_MAX_RANKS];
};
struct PeerPads {
  uint32_t* p[KF_MAX_RANKS];
};

struct State {
  uint32_t* epochs = nullptr;
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

template <typename T>
__global__ void __launch_bounds__(kThreads)
    PullRotate(PeerPtrs q, PeerPtrs k, PeerPtrs cs, PeerPtrs sn, T* q_out, T* k_out, int64_t b,
               int64_t s, int64_t nh, int64_t d, PeerPads pads, uint32_t* epochs, int rank,
               int world) {
  __shared__ uint32_t epoch_sh;
  if (threadIdx.x == 0) epoch_sh = epochs[blockIdx.x] + 1;
  __syncthreads();
  const uint32_t epoch = epoch_sh;
  if (threadIdx.x < world && threadIdx.x != rank) {
    kf_signal(pads.p[threadIdx.x] + blockIdx.x * world + rank, epoch);
    kf_wait(pads.p[rank] + blockIdx.x * world + threadIdx.x, epoch);
  }
  __syncthreads();

  const int64_t half = d / 2;
  const int64_t total = world * s;
  // Pairs of one output tensor, in output order: (b, t, h, j < half).
  const int64_t pairs = b * total * nh * half;
  for (int64_t i = blockIdx.x * (int64_t)kThreads + threadIdx.x; i < 2 * pairs;
       i += (int64_t)gridDim.x * kThreads) {
    const bool is_k = i >= pairs;
    const int64_t pi = is_k ? i - pairs : i;
    const int64_t j = pi % half, h = (pi / half) % nh, t = (pi / (half * nh)) % total;
    const int64_t bi = pi / (half * nh * total);
    const int p = static_cast<int>(t / s);
    const int64_t si = t % s;
    const T* x = static_cast<const T*>(is_k ? k.p[p] : q.p[p]) + ((bi * s + si) * nh + h) * d;
    const T* c = static_cast<const T*>(cs.p[p]) + (bi * s + si) * d;
    const T* sv = static_cast<const T*>(sn.p[p]) + (bi * s + si) * d;
    const float x0 = ToFloat(x[j]), x1 = ToFloat(x[j + half]);
    T* o = (is_k ? k_out : q_out) + ((bi * total + t) * nh + h) * d;
    o[j] = FromFloat<T>(x0 * ToFloat(c[j]) - x1 * ToFloat(sv[j]));
    o[j + half] = FromFloat<T>(x1 * ToFloat(c[j + half]) + x0 * ToFloat(sv[j + half]));
  }
  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch;
}

template <typename T>
int Run(kf_ctx* ctx, const State* st) {
  const kf_tensor* q = kf_input(ctx, "q");
  const kf_tensor* k = kf_input(ctx, "k");
  const kf_tensor* cs = kf_input(ctx, "cos");
  const kf_tensor* sn = kf_input(ctx, "sin");
  kf_tensor* q_out = kf_output(ctx, "q_out");
  kf_tensor* k_out = kf_output(ctx, "k_out");
  if (!q || !k || !cs || !sn || !q_out || !k_out || q->ndim != 4) return 1;
  PeerPtrs qp, kp, cp, sp;
  PeerPads pads;
  for (int r = 0; r < KF_MAX_RANKS; ++r) {
    const bool in = r < ctx->world_size;
    qp.p[r] = in ? q->peers[r] : nullptr;
    kp.p[r] = in ? k->peers[r] : nullptr;
    cp.p[r] = in ? cs->peers[r] : nullptr;
    sp.p[r] = in ? sn->peers[r] : nullptr;
    pads.p[r] = in ? static_cast<uint32_t*>(ctx->signal_pad.peers[r]) : nullptr;
  }
  PullRotate<T><<<st->blocks, kThreads, 0, ctx->stream>>>(
      qp, kp, cp, sp, static_cast<T*>(q_out->data), static_cast<T*>(k_out->data), q->shape[0],
      q->shape[1], q->shape[2], q->shape[3], pads, st->epochs, ctx->rank, ctx->world_size);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size > kThreads) return 1;
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  // Same grid on every rank; when ranks share one GPU all grids must be resident.
  int blocks = ctx->emulated ? sms / (2 * ctx->world_size) : 4 * sms;
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
