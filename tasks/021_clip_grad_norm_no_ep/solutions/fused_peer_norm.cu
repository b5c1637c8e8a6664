// Clip-grad-norm in ONE kernel: the reduction is fused with the computation.
//
// Every block computes the sum of squares of its share of the local gradients,
// then stores that fp32 partial straight into the workspace of every rank
// (peer stores over NVLink), slot [parity][src rank][block], and raises a flag
// in that rank's signal pad. Each block then waits for all W x B flags of its
// own pad, adds the W x B partials in one fixed order (in fp64, so every block
// of every rank gets a bit-identical norm), and scales the same share of the
// gradients it has just read (often still in L2). No collective launch, no
// host round trip, one kernel instead of three plus a memset.
//
// Ordering: a flag is raised with a release store by the thread that stored
// the partial, and read with an acquire spin, so a block that has seen every
// flag sees every partial. Partials are double-buffered by call parity: a
// peer can be at most one call ahead (to start call e+2 it needs this rank's
// flags of call e+1, which this rank raises only after its call e finished
// reading), so it never overwrites a slot that is still being read. Flags carry
// the call's epoch (kept per block in device memory; the pad is zeroed only at
// setup), so back-to-back calls need no reset. Only this rank writes its own
// gradients, so the harness's restore of the inout tensors never races a peer.
//
// Co-residency: every block waits for every block of every rank, so all of
// them must be resident at once: one block per SM on a rank's own GPU, and a
// share of the SMs per rank when the ranks are emulated on one GPU.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 512;
constexpr int kMaxSegs = 4;

struct Segs {
  void* p[kMaxSegs];
  int64_t n[kMaxSegs];
  float pre[kMaxSegs];  // in-place pre-scale of a segment before its norm (1 here)
  int count;
};

struct Peers {
  float* ws[KF_MAX_RANKS];
  uint32_t* pad[KF_MAX_RANKS];
};

struct State {
  uint32_t* epochs = nullptr;  // calls made by each block
  int blocks = 0;
};

// 16 bytes of T <-> fp32 values (tensors are 256-byte aligned, so a segment's
// full vectors are aligned; the tail is done element by element).
template <typename T>
struct Vec;
template <>
struct Vec<float> {
  static constexpr int kPer = 4;
  __device__ static float Load(const float* p) { return *p; }
  __device__ static void Store(float* p, float v) { *p = v; }
  __device__ static void Unpack(const uint4& v, float* f) {
    f[0] = __uint_as_float(v.x);
    f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z);
    f[3] = __uint_as_float(v.w);
  }
  __device__ static uint4 Pack(const float* f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                      __float_as_uint(f[3]));
  }
};
template <>
struct Vec<__nv_bfloat16> {
  static constexpr int kPer = 8;
  __device__ static float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
  __device__ static void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
  __device__ static void Unpack(const uint4& v, float* f) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 t = __bfloat1622float2(h[i]);
      f[2 * i] = t.x;
      f[2 * i + 1] = t.y;
    }
  }
  __device__ static uint4 Pack(const float* f) {
    uint4 v;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return v;
  }
};

template <typename T>
__device__ double BlockSum(T v, T* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  T s = 0;
  if (threadIdx.x < 32) {
    s = threadIdx.x < kThreads / 32 ? scratch[threadIdx.x] : T(0);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  }
  return s;  // valid in thread 0
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    FusedClip(Segs segs, float max_norm, float* norm_out, Peers peers, uint32_t* epochs, int rank,
              int world) {
  using V = Vec<T>;
  __shared__ float fscratch[kThreads / 32];
  __shared__ double dscratch[kThreads / 32];
  __shared__ float partial;
  __shared__ float coef_s;
  __shared__ uint32_t epoch_s;
  if (threadIdx.x == 0) epoch_s = epochs[blockIdx.x] + 1;

  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  float local = 0.f;
  for (int s = 0; s < segs.count; ++s) {
    const T* p = static_cast<const T*>(segs.p[s]);
    const float pre = segs.pre[s];
    const int64_t units = segs.n[s] / V::kPer;
    for (int64_t u = tid; u < units; u += stride) {
      float f[V::kPer];
      V::Unpack(reinterpret_cast<const uint4*>(p)[u], f);
#pragma unroll
      for (int k = 0; k < V::kPer; ++k) {
        const float x = f[k] * pre;
        local += x * x;
      }
    }
    for (int64_t i = units * V::kPer + tid; i < segs.n[s]; i += stride) {
      const float x = V::Load(p + i) * pre;
      local += x * x;
    }
  }
  const float b = static_cast<float>(BlockSum<float>(local, fscratch));
  if (threadIdx.x == 0) partial = b;
  __syncthreads();
  const uint32_t epoch = epoch_s;
  const int nb = gridDim.x;
  const int slots = world * nb;
  const size_t base = static_cast<size_t>(epoch & 1u) * slots;

  // Publish this block's partial to every rank (this rank included).
  if (threadIdx.x < world) {
    const int dst = threadIdx.x;
    peers.ws[dst][base + rank * nb + blockIdx.x] = partial;
    kf_signal(peers.pad[dst] + rank * nb + blockIdx.x, epoch);
  }
  // Wait for every block of every rank, then add all partials in one order.
  for (int i = threadIdx.x; i < slots; i += blockDim.x) kf_wait(peers.pad[rank] + i, epoch);
  __syncthreads();
  double acc = 0;
  const volatile float* mine = peers.ws[rank] + base;
  for (int i = threadIdx.x; i < slots; i += blockDim.x) acc += static_cast<double>(mine[i]);
  const double sum_sq = BlockSum<double>(acc, dscratch);
  if (threadIdx.x == 0) {
    const float norm = static_cast<float>(sqrt(sum_sq));
    coef_s = norm > max_norm ? max_norm / norm : 1.f;
    if (blockIdx.x == 0) *norm_out = norm;
    epochs[blockIdx.x] = epoch;
  }
  __syncthreads();

  // Scale the same share: in place, pre-scale and clip coefficient together.
  const float coef = coef_s;
  for (int s = 0; s < segs.count; ++s) {
    const float m = segs.pre[s] * coef;
    if (m == 1.f) continue;  // nothing to change
    T* p = static_cast<T*>(segs.p[s]);
    const int64_t units = segs.n[s] / V::kPer;
    for (int64_t u = tid; u < units; u += stride) {
      float f[V::kPer];
      V::Unpack(reinterpret_cast<const uint4*>(p)[u], f);
#pragma unroll
      for (int k = 0; k < V::kPer; ++k) f[k] *= m;
      reinterpret_cast<uint4*>(p)[u] = V::Pack(f);
    }
    for (int64_t i = units * V::kPer + tid; i < segs.n[s]; i += stride) {
      V::Store(p + i, V::Load(p + i) * m);
    }
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int world = ctx->world_size;
  if (world < 1 || world > KF_MAX_RANKS) return 1;
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int blocks = ctx->emulated ? sms / (2 * world) : sms;
  // The pad holds W x blocks flags; the workspace two parities of W x blocks floats.
  const size_t pad_cap = ctx->signal_pad.nbytes / (sizeof(uint32_t) * world);
  const size_t ws_cap = ctx->workspace.nbytes / (2 * sizeof(float) * world);
  if (static_cast<size_t>(blocks) > pad_cap) blocks = static_cast<int>(pad_cap);
  if (static_cast<size_t>(blocks) > ws_cap) blocks = static_cast<int>(ws_cap);
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
  const State* st = static_cast<const State*>(ctx->user);
  if (st == nullptr) return 1;
  Segs segs{};
  const char* names[] = {"g0", "g1", "g2"};
  for (const char* name : names) {
    kf_tensor* t = kf_input(ctx, name);
    if (t == nullptr) return 1;
    segs.p[segs.count] = t->data;
    segs.n[segs.count] = t->numel;
    segs.pre[segs.count] = 1.f;
    ++segs.count;
  }
  kf_tensor* norm = kf_output(ctx, "total_norm");
  if (norm == nullptr) return 1;
  Peers peers{};
  for (int r = 0; r < ctx->world_size; ++r) {
    peers.ws[r] = static_cast<float*>(ctx->workspace.peers[r]);
    peers.pad[r] = static_cast<uint32_t*>(ctx->signal_pad.peers[r]);
  }
  const float max_norm = static_cast<float>(kf_param(ctx, "max_norm", 1.0));
  float* out = static_cast<float*>(norm->data);
  switch (kf_input(ctx, "g0")->dtype) {
    case KF_BF16:
      FusedClip<__nv_bfloat16><<<st->blocks, kThreads, 0, ctx->stream>>>(
          segs, max_norm, out, peers, st->epochs, ctx->rank, ctx->world_size);
      break;
    case KF_F32:
      FusedClip<float><<<st->blocks, kThreads, 0, ctx->stream>>>(
          segs, max_norm, out, peers, st->epochs, ctx->rank, ctx->world_size);
      break;
    default:
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
