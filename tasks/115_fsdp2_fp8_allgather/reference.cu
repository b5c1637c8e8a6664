// FSDP2 float8 all-gather baseline, as torchao + FSDP2 do it: the inf-norm of every
// weight's local shard, one all-reduce(max) of all of them and the scales
// (precompute_float8_dynamic_scale_for_fsdp); every padded shard cast to float8 into one
// flat buffer (fsdp_pre_all_gather + foreach_all_gather's copy-in), one all-gather, and the
// copy-out of every rank's real rows into the unsharded weights.
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int64_t Cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// blockIdx.y: weight t; the max |w| over this rank's real rows, into amax[t] (as bits:
// non-negative floats order like their bit patterns).
__global__ void LocalAmax(const float* shards, const int64_t* table, int rank, int world,
                          uint32_t* amax) {
  const int64_t* row = table + 4 * blockIdx.y;
  const int64_t rows = row[0], cols = row[1], c = Cdiv(rows, world);
  const int64_t real = max(static_cast<int64_t>(0), min(rows, (rank + 1) * c) - rank * c);
  const float* x = shards + row[2];
  float m = 0.0f;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < real * cols;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(x[j]));
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
  if ((threadIdx.x & 31) == 0) atomicMax(amax + blockIdx.y, __float_as_uint(m));
}

__device__ __forceinline__ float ScaleOf(float amax) {
  const float a = fmaxf(amax, 1e-12f);
  return static_cast<float>(448.0 / static_cast<double>(a));
}

// blockIdx.y: weight t; its whole padded shard to fp8 with the weight's scale.
__global__ void Quantize(const float* shards, const int64_t* table, int world, const float* amax,
                         uint8_t* flat, float* scales) {
  const int64_t* row = table + 4 * blockIdx.y;
  const int64_t n = Cdiv(row[0], world) * row[1];
  const float s = ScaleOf(amax[blockIdx.y]);
  if (blockIdx.x == 0 && threadIdx.x == 0) scales[blockIdx.y] = s;
  const float* x = shards + row[2];
  uint8_t* q = flat + row[2];
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x)
    q[j] = __nv_cvt_float_to_fp8(__fmul_rn(x[j], s), __NV_SATFINITE, __NV_E4M3);
}

// blockIdx.y: weight t, blockIdx.z: source rank; its real rows into the weight.
__global__ void CopyOut(const uint8_t* gathered, int64_t s_len, const int64_t* table, int world,
                        uint8_t* out) {
  const int64_t* row = table + 4 * blockIdx.y;
  const int r = blockIdx.z;
  const int64_t rows = row[0], cols = row[1], c = Cdiv(rows, world);
  const int64_t real = max(static_cast<int64_t>(0), min(rows, (r + 1) * c) - r * c);
  const uint8_t* from = gathered + r * s_len + row[2];
  uint8_t* to = out + row[3] + r * c * cols;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < real * cols;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x)
    to[j] = from[j];
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& shards = *kf_input(ctx, "shards");
  const kf_tensor& tensors = *kf_input(ctx, "tensors");
  const int nt = static_cast<int>(tensors.shape[0]);
  const int64_t s_len = shards.numel;
  const int w = ctx->world_size;
  const size_t amax_bytes = (2 * nt * sizeof(float) + 255) / 256 * 256;
  const size_t flat_bytes = (static_cast<size_t>(s_len) + 255) / 256 * 256;
  if (amax_bytes + flat_bytes + static_cast<size_t>(w) * s_len > ctx->workspace.nbytes) return 1;
  char* ws = static_cast<char*>(ctx->workspace.data);
  uint32_t* local = reinterpret_cast<uint32_t*>(ws);
  float* amax = reinterpret_cast<float*>(ws) + nt;
  uint8_t* flat = reinterpret_cast<uint8_t*>(ws + amax_bytes);
  uint8_t* gathered = flat + flat_bytes;
  const int64_t* table = static_cast<const int64_t*>(tensors.data);
  const unsigned gx = static_cast<unsigned>(
      (ctx->gpu.sm_count * 4 + nt - 1) / nt < 1 ? 1 : (ctx->gpu.sm_count * 4 + nt - 1) / nt);
  if (cudaMemsetAsync(local, 0, nt * sizeof(uint32_t), ctx->stream) != cudaSuccess) return 2;
  LocalAmax<<<dim3(gx, nt), kThreads, 0, ctx->stream>>>(static_cast<const float*>(shards.data),
                                                        table, ctx->rank, w, local);
  if (cudaGetLastError() != cudaSuccess) return 3;
  if (kf_all_reduce(ctx, local, amax, static_cast<size_t>(nt), KF_F32, KF_MAX) != 0) return 4;
  Quantize<<<dim3(gx, nt), kThreads, 0, ctx->stream>>>(
      static_cast<const float*>(shards.data), table, w, amax, flat,
      static_cast<float*>(kf_output(ctx, "scales")->data));
  if (cudaGetLastError() != cudaSuccess) return 5;
  if (kf_all_gather(ctx, flat, gathered, static_cast<size_t>(s_len), KF_U8) != 0) return 6;
  CopyOut<<<dim3(gx, nt, w), kThreads, 0, ctx->stream>>>(
      gathered, s_len, table, w, static_cast<uint8_t*>(kf_output(ctx, "weights_fp8")->data));
  return cudaGetLastError() != cudaSuccess ? 7 : 0;
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
