// RoPE + sequence all-gather baseline: a rotary kernel writes this rank's
// rotated q and k shards into the workspace, one harness all-gather per tensor
// stacks the shards rank by rank, and (when B > 1, where rank-major is not the
// [B, W*S, ...] layout) a copy kernel reorders them into the outputs.
#include <cuda_bf16.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

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

// x, out [B*S, NH, D]; cos, sin [B*S, D].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    Rope(const T* x, const T* cs, const T* sn, T* out, int64_t rows, int64_t nh, int64_t d) {
  const int64_t half = d / 2, n = rows * nh * d;
  for (int64_t i = blockIdx.x * (int64_t)kThreads + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * kThreads) {
    const int64_t j = i % d, row = i / (nh * d);
    const float rot = j < half ? -ToFloat(x[i + half]) : ToFloat(x[i - half]);
    out[i] =
        FromFloat<T>(ToFloat(x[i]) * ToFloat(cs[row * d + j]) + rot * ToFloat(sn[row * d + j]));
  }
}

// gathered [W, B, S, inner] -> out [B, W*S, inner].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    Reorder(const T* gathered, T* out, int world, int64_t b, int64_t s, int64_t inner) {
  const int64_t n = world * b * s * inner;
  for (int64_t i = blockIdx.x * (int64_t)kThreads + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * kThreads) {
    const int64_t e = i % inner, rest = i / inner;
    const int64_t si = rest % s, bi = (rest / s) % b, p = rest / (s * b);
    out[(bi * world * s + p * s + si) * inner + e] = gathered[i];
  }
}

template <typename T>
int Run(kf_ctx* ctx) {
  const kf_tensor* q = kf_input(ctx, "q");
  const kf_tensor* k = kf_input(ctx, "k");
  const kf_tensor* cs = kf_input(ctx, "cos");
  const kf_tensor* sn = kf_input(ctx, "sin");
  kf_tensor* q_out = kf_output(ctx, "q_out");
  kf_tensor* k_out = kf_output(ctx, "k_out");
  if (!q || !k || !cs || !sn || !q_out || !k_out || q->ndim != 4) return 1;
  const int64_t b = q->shape[0], s = q->shape[1], nh = q->shape[2], d = q->shape[3];
  const int64_t shard = q->numel, world = ctx->world_size;
  if (ctx->workspace.nbytes < 2 * (world + 1) * shard * sizeof(T)) return 1;
  T* rot = static_cast<T*>(ctx->workspace.data);  // [2][shard]
  T* gathered = rot + 2 * shard;                  // [2][W][shard]
  const int64_t want = (shard + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(want < 4096 ? want : 4096);
  const kf_tensor* in[2] = {q, k};
  kf_tensor* out[2] = {q_out, k_out};
  for (int t = 0; t < 2; ++t) {
    Rope<T><<<grid, kThreads, 0, ctx->stream>>>(
        static_cast<const T*>(in[t]->data), static_cast<const T*>(cs->data),
        static_cast<const T*>(sn->data), rot + t * shard, b * s, nh, d);
    if (cudaGetLastError() != cudaSuccess) return 1;
    // With B == 1 the rank-major stack is already [1, W*S, NH, D].
    T* dst = b == 1 ? static_cast<T*>(out[t]->data) : gathered + t * world * shard;
    if (kf_all_gather(ctx, rot + t * shard, dst, static_cast<size_t>(shard), in[t]->dtype) != 0)
      return 1;
    if (b != 1) {
      Reorder<T><<<grid, kThreads, 0, ctx->stream>>>(dst, static_cast<T*>(out[t]->data),
                                                     ctx->world_size, b, s, nh * d);
      if (cudaGetLastError() != cudaSuccess) return 1;
    }
  }
  return 0;
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  switch (ctx->inputs[0].dtype) {
    case KF_BF16:
      return Run<__nv_bfloat16>(ctx);
    case KF_F32:
      return Run<float>(ctx);
    default:
      return 2;
  }
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
