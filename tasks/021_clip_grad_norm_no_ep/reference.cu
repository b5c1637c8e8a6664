// Clip-grad-norm baseline, as PyTorch/VeOmni do it: a sum-of-squares kernel over
// the local shards (fp32 atomics into one workspace float), one harness
// all-reduce of that float (NCCL on real GPUs), then a kernel that derives the
// norm and the clip coefficient and scales the gradients in place.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxSegs = 3;

struct Segs {
  void* p[kMaxSegs];
  int64_t n[kMaxSegs];
  int count;
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
__global__ void __launch_bounds__(kThreads) SumSquares(Segs segs, float* acc) {
  using V = Vec<T>;
  float local = 0.f;
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int s = 0; s < segs.count; ++s) {
    const T* p = static_cast<const T*>(segs.p[s]);
    const int64_t units = segs.n[s] / V::kPer;
    for (int64_t u = tid; u < units; u += stride) {
      float f[V::kPer];
      V::Unpack(reinterpret_cast<const uint4*>(p)[u], f);
#pragma unroll
      for (int k = 0; k < V::kPer; ++k) local += f[k] * f[k];
    }
    for (int64_t i = units * V::kPer + tid; i < segs.n[s]; i += stride) {
      const float v = V::Load(p + i);
      local += v * v;
    }
  }
  const float b = BlockSum(local);
  if (threadIdx.x == 0) atomicAdd(acc, b);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    ClipScale(Segs segs, const float* sum_sq, float max_norm, float* norm_out) {
  using V = Vec<T>;
  const float norm = sqrtf(*sum_sq);
  if (blockIdx.x == 0 && threadIdx.x == 0) *norm_out = norm;
  if (!(norm > max_norm)) return;  // no clipping: the gradients stay as they are
  const float coef = max_norm / norm;
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int s = 0; s < segs.count; ++s) {
    T* p = static_cast<T*>(segs.p[s]);
    const int64_t units = segs.n[s] / V::kPer;
    for (int64_t u = tid; u < units; u += stride) {
      float f[V::kPer];
      V::Unpack(reinterpret_cast<const uint4*>(p)[u], f);
#pragma unroll
      for (int k = 0; k < V::kPer; ++k) f[k] *= coef;
      reinterpret_cast<uint4*>(p)[u] = V::Pack(f);
    }
    for (int64_t i = units * V::kPer + tid; i < segs.n[s]; i += stride) {
      V::Store(p + i, V::Load(p + i) * coef);
    }
  }
}

template <typename T>
int Run(kf_ctx* ctx, const Segs& segs, float max_norm, float* norm_out) {
  float* acc = static_cast<float*>(ctx->workspace.data);
  int64_t total = 0;
  for (int s = 0; s < segs.count; ++s) total += segs.n[s];
  int64_t blocks = (total + kThreads - 1) / kThreads;
  const int64_t cap = 4LL * (ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1);
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  if (cudaMemsetAsync(acc, 0, sizeof(float), ctx->stream) != cudaSuccess) return 1;
  SumSquares<T><<<static_cast<int>(blocks), kThreads, 0, ctx->stream>>>(segs, acc);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_reduce(ctx, acc, acc, 1, KF_F32, KF_SUM) != 0) return 1;
  ClipScale<T>
      <<<static_cast<int>(blocks), kThreads, 0, ctx->stream>>>(segs, acc, max_norm, norm_out);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  Segs segs{};
  const char* names[kMaxSegs] = {"g0", "g1", "g2"};
  for (int s = 0; s < kMaxSegs; ++s) {
    kf_tensor* t = kf_input(ctx, names[s]);
    if (t == nullptr) return 1;
    segs.p[s] = t->data;
    segs.n[s] = t->numel;
  }
  segs.count = kMaxSegs;
  kf_tensor* norm = kf_output(ctx, "total_norm");
  if (norm == nullptr || ctx->workspace.nbytes < sizeof(float)) return 1;
  const float max_norm = static_cast<float>(kf_param(ctx, "max_norm", 1.0));
  float* out = static_cast<float*>(norm->data);
  switch (kf_input(ctx, "g0")->dtype) {
    case KF_BF16:
      return Run<__nv_bfloat16>(ctx, segs, max_norm, out);
    case KF_F32:
      return Run<float>(ctx, segs, max_norm, out);
    default:
      return 2;
  }
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
