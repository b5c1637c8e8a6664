// Sharded Adam fused with the all-gather: every block updates its slice of
// this rank's shard (master, m, v in place) and stores the cast result
// straight into every rank's params buffer at offset rank * P, so the
// all-gather rides on the update's own stores and no separate collective or
// staging copy exists.
//
// Synchronisation, per block b (the grid is the same on every rank, so block b
// of every rank covers the same indices of its own shard):
//   start: block b tells block b of every peer "I am in this call" and waits
//          for the same from all of them; only then may it store into peers'
//          params (a peer still in its previous call, or not yet poisoned for
//          this one, must not receive this call's values);
//   end:   after its stores, block b tells every peer "my part of your params
//          is written" and waits for all peers' block b; when every block of
//          this rank has passed, every segment of its params is complete.
// Slots: start at pad[b * W + src], end at pad[(B + b) * W + src]; one epoch
// per block, growing by one per call, kept in device memory.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

struct Peers {
  uint32_t* pad[KF_MAX_RANKS];
  void* params[KF_MAX_RANKS];
};

struct Hyper {
  float lr, beta1, beta2, eps;
  double beta1_d, beta2_d;
};

struct State {
  uint32_t* epochs = nullptr;
  int blocks = 0;
};

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Thread q < W (q != rank) signals peer q's slot and waits for its own slot q.
__device__ __forceinline__ void Handshake(const Peers& peers, int slot_base, int rank, int world,
                                          uint32_t epoch) {
  __syncthreads();
  const int q = threadIdx.x;
  if (q < world && q != rank) {
    __threadfence_system();
    kf_signal(peers.pad[q] + slot_base + rank, epoch);
    kf_wait(peers.pad[rank] + slot_base + q, epoch);
  }
  __syncthreads();
}

// One element: the Adam update, then the cast value to every rank.
template <typename T>
__device__ __forceinline__ void UpdateOne(const T* grad, float* master, float* m, float* v,
                                          int64_t i, const Hyper& h, float step_size,
                                          float inv_bc2_sqrt, const Peers& peers, int64_t offset,
                                          int world) {
  const float g = ToFloat(grad[i]);
  const float mi = h.beta1 * m[i] + (1.0f - h.beta1) * g;
  const float vi = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
  const float p = master[i] - step_size * mi / (sqrtf(vi) * inv_bc2_sqrt + h.eps);
  m[i] = mi;
  v[i] = vi;
  master[i] = p;
  const T out = FromFloat<T>(p);
  for (int q = 0; q < world; ++q) static_cast<T*>(peers.params[q])[offset + i] = out;
}

// kVec consecutive elements per thread: 16-byte loads of grad and 16-byte
// stores into each peer's params (NVLink moves 16-byte stores far better than
// 2-byte ones). Used when every pointer involved is 16-byte aligned.
template <typename T>
__device__ __forceinline__ void UpdateVec(const T* grad, float* master, float* m, float* v,
                                          int64_t i, const Hyper& h, float step_size,
                                          float inv_bc2_sqrt, const Peers& peers, int64_t offset,
                                          int world) {
  constexpr int kVec = 16 / sizeof(T);
  alignas(16) T g[kVec];
  alignas(16) T out[kVec];
  *reinterpret_cast<uint4*>(g) = *reinterpret_cast<const uint4*>(grad + i);
#pragma unroll
  for (int k = 0; k < kVec; k += 4) {
    float4 mv = *reinterpret_cast<const float4*>(m + i + k);
    float4 vv = *reinterpret_cast<const float4*>(v + i + k);
    float4 pv = *reinterpret_cast<const float4*>(master + i + k);
    float* mf = reinterpret_cast<float*>(&mv);
    float* vf = reinterpret_cast<float*>(&vv);
    float* pf = reinterpret_cast<float*>(&pv);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float gj = ToFloat(g[k + j]);
      mf[j] = h.beta1 * mf[j] + (1.0f - h.beta1) * gj;
      vf[j] = h.beta2 * vf[j] + (1.0f - h.beta2) * gj * gj;
      pf[j] = pf[j] - step_size * mf[j] / (sqrtf(vf[j]) * inv_bc2_sqrt + h.eps);
      out[k + j] = FromFloat<T>(pf[j]);
    }
    *reinterpret_cast<float4*>(m + i + k) = mv;
    *reinterpret_cast<float4*>(v + i + k) = vv;
    *reinterpret_cast<float4*>(master + i + k) = pv;
  }
  const uint4 o = *reinterpret_cast<const uint4*>(out);
  for (int q = 0; q < world; ++q) {
    *reinterpret_cast<uint4*>(static_cast<T*>(peers.params[q]) + offset + i) = o;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    AdamPush(const T* grad, float* master, float* m, float* v, const int* step, int64_t n, Hyper h,
             Peers peers, uint32_t* epochs, int rank, int world, bool vec) {
  __shared__ float step_size, inv_bc2_sqrt;
  __shared__ uint32_t epoch;
  if (threadIdx.x == 0) {
    const double t = static_cast<double>(*step);
    step_size = static_cast<float>(h.lr / (1.0 - pow(h.beta1_d, t)));
    inv_bc2_sqrt = static_cast<float>(1.0 / sqrt(1.0 - pow(h.beta2_d, t)));
    epoch = epochs[blockIdx.x] + 1;
  }
  __syncthreads();
  const uint32_t e = epoch;
  Handshake(peers, blockIdx.x * world, rank, world, e);

  const int64_t offset = static_cast<int64_t>(rank) * n;
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (vec) {
    constexpr int kVec = 16 / sizeof(T);
    const int64_t units = n / kVec;
    for (int64_t u = tid; u < units; u += stride) {
      UpdateVec<T>(grad, master, m, v, u * kVec, h, step_size, inv_bc2_sqrt, peers, offset, world);
    }
    done = units * kVec;
  }
  for (int64_t i = done + tid; i < n; i += stride) {
    UpdateOne<T>(grad, master, m, v, i, h, step_size, inv_bc2_sqrt, peers, offset, world);
  }

  Handshake(peers, (gridDim.x + blockIdx.x) * world, rank, world, e);
  if (threadIdx.x == 0) epochs[blockIdx.x] = e;
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size < 1 || ctx->world_size > KF_MAX_RANKS) return 1;
  // Every rank's blocks spin on peers' blocks: when ranks share one GPU all W
  // grids must be resident at once. Two slot sets of B * W slots each.
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int blocks = ctx->emulated ? sms / (2 * ctx->world_size) : 2 * sms;
  const int pad_blocks =
      static_cast<int>(ctx->signal_pad.nbytes / (2 * sizeof(uint32_t) * ctx->world_size));
  if (blocks > pad_blocks) blocks = pad_blocks;
  if (blocks < 1) return 1;
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
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor* grad = kf_input(ctx, "grad");
  const kf_tensor* master = kf_input(ctx, "master");
  const kf_tensor* m = kf_input(ctx, "exp_avg");
  const kf_tensor* v = kf_input(ctx, "exp_avg_sq");
  const kf_tensor* step = kf_input(ctx, "step");
  const kf_tensor* params = kf_output(ctx, "params");
  if (!st || !grad || !master || !m || !v || !step || !params) return 1;
  const int64_t n = grad->numel;
  const int world = ctx->world_size;
  Peers peers = {};
  for (int q = 0; q < world; ++q) {
    peers.pad[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
    peers.params[q] = params->peers[q];
  }
  const size_t elem = kf_dtype_size(grad->dtype);
  // The vector path needs every rank's segment start (rank * n elements) and
  // every base pointer 16-byte aligned; n being a multiple of the vector
  // width makes all segment starts aligned. The same on every rank.
  bool vec = (n * static_cast<int64_t>(elem)) % 16 == 0 && Aligned16(grad->data) &&
             Aligned16(master->data) && Aligned16(m->data) && Aligned16(v->data);
  for (int q = 0; q < world; ++q) vec = vec && Aligned16(params->peers[q]);
  const double beta1 = kf_param(ctx, "beta1", 0.9), beta2 = kf_param(ctx, "beta2", 0.999);
  const Hyper h = {static_cast<float>(kf_param(ctx, "lr", 1e-3)),
                   static_cast<float>(beta1),
                   static_cast<float>(beta2),
                   static_cast<float>(kf_param(ctx, "eps", 1e-8)),
                   beta1,
                   beta2};
  const int per_thread = vec ? static_cast<int>(16 / elem) : 1;
  int64_t blocks = (n / per_thread + kThreads - 1) / kThreads;
  if (blocks > st->blocks) blocks = st->blocks;
  if (blocks < 1) blocks = 1;
  const int b = static_cast<int>(blocks);
  float* mp = static_cast<float*>(master->data);
  float* mm = static_cast<float*>(m->data);
  float* vv = static_cast<float*>(v->data);
  const int* sp = static_cast<const int*>(step->data);
  if (grad->dtype == KF_BF16) {
    AdamPush<__nv_bfloat16>
        <<<b, kThreads, 0, ctx->stream>>>(static_cast<const __nv_bfloat16*>(grad->data), mp, mm, vv,
                                          sp, n, h, peers, st->epochs, ctx->rank, world, vec);
  } else if (grad->dtype == KF_F32) {
    AdamPush<float><<<b, kThreads, 0, ctx->stream>>>(static_cast<const float*>(grad->data), mp, mm,
                                                     vv, sp, n, h, peers, st->epochs, ctx->rank,
                                                     world, vec);
  } else {
    return 2;
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
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
