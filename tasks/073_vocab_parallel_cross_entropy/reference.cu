// Vocabulary-parallel cross-entropy baseline, as Megatron does it: a row max,
// a harness all-reduce (MAX), a row kernel that shifts the logits in place and
// takes the fp32 sum of exp and the predicted logit (0 unless this rank owns
// the target), one harness all-reduce (SUM) of both, and loss = log(sum) - pred.
#include <cuda_bf16.h>
#include <stdint.h>

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

// Reduces over the block with `op`; every thread gets the result.
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

template <typename T>
__global__ void __launch_bounds__(kThreads)
    RowMax(const T* logits, float* row_max, int64_t rows, int64_t vl) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < vl; c += kThreads)
      m = fmaxf(m, ToFloat(logits[row * vl + c]));
    m = BlockReduce(m, Max());
    if (threadIdx.x == 0) row_max[row] = m;
  }
}

// partial[row] = sum of exp, partial[rows + row] = predicted logit (shifted).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ShiftSumExp(T* logits, const int64_t* target, const float* row_max, float* partial,
                int64_t rows, int64_t vl, int64_t lo) {
  __shared__ float pred;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float m = row_max[row];
    T* x = logits + row * vl;
    if (threadIdx.x == 0) {
      const int64_t t = target[row] - lo;
      pred = t >= 0 && t < vl ? ToFloat(x[t]) - m : 0.f;
    }
    __syncthreads();  // `pred` is read before anyone shifts x[t]
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < vl; c += kThreads) {
      const float v = ToFloat(x[c]) - m;
      x[c] = FromFloat<T>(v);
      s += expf(v);
    }
    s = BlockReduce(s, Sum());
    if (threadIdx.x == 0) {
      partial[row] = s;
      partial[rows + row] = pred;
    }
  }
}

template <typename T>
__global__ void Finish(const float* total, T* loss, int64_t rows) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows;
       i += (int64_t)gridDim.x * blockDim.x)
    loss[i] = FromFloat<T>(logf(total[i]) - total[rows + i]);
}

template <typename T>
int Run(kf_ctx* ctx) {
  kf_tensor* logits = kf_input(ctx, "logits");
  const kf_tensor* target = kf_input(ctx, "target");
  kf_tensor* loss = kf_output(ctx, "loss");
  if (!logits || !target || !loss || logits->ndim != 3) return 1;
  const int64_t rows = logits->shape[0] * logits->shape[1], vl = logits->shape[2];
  if (ctx->workspace.nbytes < 6 * rows * sizeof(float)) return 1;
  float* local_max = static_cast<float*>(ctx->workspace.data);
  float* global_max = local_max + rows;
  float* partial = global_max + rows;  // [2 * rows]
  float* total = partial + 2 * rows;   // [2 * rows]
  const int grid = static_cast<int>(rows < 65535 ? rows : 65535);
  T* x = static_cast<T*>(logits->data);
  RowMax<T><<<grid, kThreads, 0, ctx->stream>>>(x, local_max, rows, vl);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_reduce(ctx, local_max, global_max, static_cast<size_t>(rows), KF_F32, KF_MAX) != 0)
    return 1;
  ShiftSumExp<T><<<grid, kThreads, 0, ctx->stream>>>(x, static_cast<const int64_t*>(target->data),
                                                     global_max, partial, rows, vl,
                                                     static_cast<int64_t>(ctx->rank) * vl);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_reduce(ctx, partial, total, static_cast<size_t>(2 * rows), KF_F32, KF_SUM) != 0)
    return 1;
  Finish<T><<<static_cast<int>((rows + kThreads - 1) / kThreads), kThreads, 0, ctx->stream>>>(
      total, static_cast<T*>(loss->data), rows);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
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
