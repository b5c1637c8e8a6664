// Sharded Adam + all-gather baseline: one elementwise kernel updates this
// rank's master, m and v in place and writes the cast shard to the workspace;
// then one harness all-gather (NCCL when every rank has its own GPU) collects
// every rank's shard into params.
#include <cuda_bf16.h>

#include "kforge/kernel.h"

namespace {

struct Hyper {
  float lr, beta1, beta2, eps;
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

// The bias corrections depend on the step, which lives in device memory:
// thread 0 of every block computes them in double once.
template <typename T>
__global__ void AdamShard(const T* grad, float* master, float* m, float* v, const int* step, T* out,
                          int64_t n, Hyper h, double beta1, double beta2) {
  __shared__ float step_size, inv_bc2_sqrt;
  if (threadIdx.x == 0) {
    const double t = static_cast<double>(*step);
    step_size = static_cast<float>(h.lr / (1.0 - pow(beta1, t)));
    inv_bc2_sqrt = static_cast<float>(1.0 / sqrt(1.0 - pow(beta2, t)));
  }
  __syncthreads();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = ToFloat(grad[i]);
    const float mi = h.beta1 * m[i] + (1.0f - h.beta1) * g;
    const float vi = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
    const float p = master[i] - step_size * mi / (sqrtf(vi) * inv_bc2_sqrt + h.eps);
    m[i] = mi;
    v[i] = vi;
    master[i] = p;
    out[i] = FromFloat<T>(p);
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor* grad = kf_input(ctx, "grad");
  const kf_tensor* master = kf_input(ctx, "master");
  const kf_tensor* m = kf_input(ctx, "exp_avg");
  const kf_tensor* v = kf_input(ctx, "exp_avg_sq");
  const kf_tensor* step = kf_input(ctx, "step");
  kf_tensor* params = kf_output(ctx, "params");
  if (!grad || !master || !m || !v || !step || !params) return 1;
  const int64_t n = grad->numel;
  const size_t elem = kf_dtype_size(grad->dtype);
  if (ctx->workspace.nbytes < static_cast<size_t>(n) * elem) return 1;
  const double beta1 = kf_param(ctx, "beta1", 0.9), beta2 = kf_param(ctx, "beta2", 0.999);
  const Hyper h = {static_cast<float>(kf_param(ctx, "lr", 1e-3)), static_cast<float>(beta1),
                   static_cast<float>(beta2), static_cast<float>(kf_param(ctx, "eps", 1e-8))};
  const int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 4 * ctx->gpu.sm_count) blocks = 4 * ctx->gpu.sm_count;
  if (blocks < 1) blocks = 1;
  float* mp = static_cast<float*>(master->data);
  float* mm = static_cast<float*>(m->data);
  float* vv = static_cast<float*>(v->data);
  const int* st = static_cast<const int*>(step->data);
  if (grad->dtype == KF_BF16) {
    AdamShard<__nv_bfloat16><<<static_cast<int>(blocks), threads, 0, ctx->stream>>>(
        static_cast<const __nv_bfloat16*>(grad->data), mp, mm, vv, st,
        static_cast<__nv_bfloat16*>(ctx->workspace.data), n, h, beta1, beta2);
  } else if (grad->dtype == KF_F32) {
    AdamShard<float><<<static_cast<int>(blocks), threads, 0, ctx->stream>>>(
        static_cast<const float*>(grad->data), mp, mm, vv, st,
        static_cast<float*>(ctx->workspace.data), n, h, beta1, beta2);
  } else {
    return 2;
  }
  if (cudaGetLastError() != cudaSuccess) return 1;
  return kf_all_gather(ctx, ctx->workspace.data, params->data, static_cast<size_t>(n), grad->dtype);
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
