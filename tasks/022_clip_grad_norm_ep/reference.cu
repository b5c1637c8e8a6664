// EP clip-grad-norm baseline, as VeOmni does it: sum-of-squares kernels (the
// non-EP grads into acc[0], the EP grads, with the 1/ep_size scaling folded in,
// into acc[1]), the reductions VeOmni issues (acc[0] over the world, acc[1] over
// the EP-FSDP group and then the EP group: harness collectives, NCCL on real
// GPUs), then one kernel that forms the norm and scales both grads in place.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

struct Seg {
  void* p;
  int64_t n;
  float pre;  // 1 for non-EP, 1/ep_size for EP
  int acc;    // which accumulator its squares go to
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

__device__ float BlockSum(float v) {
  __shared__ float warp_sums[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  float s = 0.f;
  if (threadIdx.x < 32) {
    s = threadIdx.x < kThreads / 32 ? warp_sums[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  }
  return s;  // valid in thread 0
}

template <typename T>
__global__ void __launch_bounds__(kThreads) SumSquares(Seg seg, float* acc) {
  using V = Vec<T>;
  float local = 0.f;
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const T* p = static_cast<const T*>(seg.p);
  const int64_t units = seg.n / V::kPer;
  for (int64_t u = tid; u < units; u += stride) {
    float f[V::kPer];
    V::Unpack(reinterpret_cast<const uint4*>(p)[u], f);
#pragma unroll
    for (int k = 0; k < V::kPer; ++k) {
      const float x = f[k] * seg.pre;
      local += x * x;
    }
  }
  for (int64_t i = units * V::kPer + tid; i < seg.n; i += stride) {
    const float x = V::Load(p + i) * seg.pre;
    local += x * x;
  }
  const float b = BlockSum(local);
  if (threadIdx.x == 0) atomicAdd(acc + seg.acc, b);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    ClipScale(Seg a, Seg b, const float* acc, float max_norm, float* norm_out) {
  using V = Vec<T>;
  const float norm = sqrtf(acc[0] + acc[1]);
  if (blockIdx.x == 0 && threadIdx.x == 0) *norm_out = norm;
  const float coef = norm > max_norm ? max_norm / norm : 1.f;
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const Seg segs[2] = {a, b};
  for (int s = 0; s < 2; ++s) {
    const float m = segs[s].pre * coef;
    if (m == 1.f) continue;
    T* p = static_cast<T*>(segs[s].p);
    const int64_t units = segs[s].n / V::kPer;
    for (int64_t u = tid; u < units; u += stride) {
      float f[V::kPer];
      V::Unpack(reinterpret_cast<const uint4*>(p)[u], f);
#pragma unroll
      for (int k = 0; k < V::kPer; ++k) f[k] *= m;
      reinterpret_cast<uint4*>(p)[u] = V::Pack(f);
    }
    for (int64_t i = units * V::kPer + tid; i < segs[s].n; i += stride) {
      V::Store(p + i, V::Load(p + i) * m);
    }
  }
}

int Blocks(const kf_ctx* ctx, int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  const int64_t cap = 4LL * (ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1);
  if (blocks > cap) blocks = cap;
  return blocks < 1 ? 1 : static_cast<int>(blocks);
}

template <typename T>
int Run(kf_ctx* ctx, const Seg& non_ep, const Seg& ep, int g_ep, int g_ep_fsdp, float max_norm,
        float* norm_out) {
  float* acc = static_cast<float*>(ctx->workspace.data);
  if (cudaMemsetAsync(acc, 0, 2 * sizeof(float), ctx->stream) != cudaSuccess) return 1;
  SumSquares<T><<<Blocks(ctx, non_ep.n), kThreads, 0, ctx->stream>>>(non_ep, acc);
  SumSquares<T><<<Blocks(ctx, ep.n), kThreads, 0, ctx->stream>>>(ep, acc);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_reduce(ctx, acc, acc, 1, KF_F32, KF_SUM) != 0) return 1;
  if (kf_group_all_reduce(ctx, g_ep_fsdp, acc + 1, acc + 1, 1, KF_F32, KF_SUM) != 0) return 1;
  if (kf_group_all_reduce(ctx, g_ep, acc + 1, acc + 1, 1, KF_F32, KF_SUM) != 0) return 1;
  ClipScale<T><<<Blocks(ctx, non_ep.n + ep.n), kThreads, 0, ctx->stream>>>(non_ep, ep, acc,
                                                                           max_norm, norm_out);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  kf_tensor* a = kf_input(ctx, "non_ep");
  kf_tensor* b = kf_input(ctx, "ep");
  kf_tensor* norm = kf_output(ctx, "total_norm");
  const int g_ep = kf_group_index(ctx, "ep");
  const int g_ep_fsdp = kf_group_index(ctx, "ep_fsdp");
  if (a == nullptr || b == nullptr || norm == nullptr || g_ep < 0 || g_ep_fsdp < 0) return 1;
  if (ctx->workspace.nbytes < 2 * sizeof(float)) return 1;
  const float ep_scale = 1.f / static_cast<float>(ctx->groups[g_ep].size);
  const Seg non_ep{a->data, a->numel, 1.f, 0};
  const Seg ep{b->data, b->numel, ep_scale, 1};
  const float max_norm = static_cast<float>(kf_param(ctx, "max_norm", 1.0));
  float* out = static_cast<float*>(norm->data);
  switch (a->dtype) {
    case KF_BF16:
      return Run<__nv_bfloat16>(ctx, non_ep, ep, g_ep, g_ep_fsdp, max_norm, out);
    case KF_F32:
      return Run<float>(ctx, non_ep, ep, g_ep, g_ep_fsdp, max_norm, out);
    default:
      return 2;
  }
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
