// Hyena context-parallel short conv, as Savanna's zigzag CP does it: pack the
// K-1 last columns of both chunks of every row into contiguous buffers, one
// group of harness sends and receives with the neighbours (NCCL's
// batch_isend_irecv on real GPUs: the first chunk's tail to rank r+1, the
// second chunk's tail to rank r-1), then the depthwise conv over
// [halo | chunk] for both chunks. Rank 0's first chunk sees zeros; rank
// W-1's second chunk takes its halo from its own first chunk.
// The conv reads the halo buffers in place: the padded copy PyTorch's cat
// makes is left out, so the baseline is not slowed by an extra pass.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

__device__ __forceinline__ float ToF(float v) { return v; }
__device__ __forceinline__ float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T FromF(float v);
template <>
__device__ __forceinline__ float FromF<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromF<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}

// send_a[row][j] = x[row][C - h + j], send_b[row][j] = x[row][2C - h + j], h = K-1.
template <typename T>
__global__ void PackTails(const T* __restrict__ x, T* __restrict__ send_a, T* __restrict__ send_b,
                          int64_t rows, int64_t c, int64_t h) {
  const int64_t n = rows * h;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = k / h, j = k - row * h;
    send_a[k] = x[row * 2 * c + c - h + j];
    send_b[k] = x[row * 2 * c + 2 * c - h + j];
  }
}

// y[row][half*C + i] = sum_j w[ch][j] * v(i - h + j), v(t) = chunk value t, or
// the halo's element h + t for t < 0: recv_a / zeros (first chunk), recv_b /
// the own first chunk's tail (second chunk).
template <typename T>
__global__ void Conv(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ recv_a,
                     const T* __restrict__ recv_b, T* __restrict__ y, int64_t rows, int64_t d,
                     int64_t c, int64_t k, bool first_rank, bool last_rank) {
  const int64_t h = k - 1;
  const int64_t n = rows * 2 * c;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = idx / (2 * c);
    const int64_t pos = idx - row * 2 * c;
    const int half = pos >= c ? 1 : 0;
    const int64_t i = pos - half * c;
    const T* chunk = x + row * 2 * c + half * c;
    const T* wr = w + (row % d) * k;
    float s = 0.f;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t t = i - h + j;
      float v;
      if (t >= 0) {
        v = ToF(chunk[t]);
      } else if (half == 0) {
        v = first_rank ? 0.f : ToF(recv_a[row * h + h + t]);
      } else {
        v = last_rank ? ToF(x[row * 2 * c + c + t]) : ToF(recv_b[row * h + h + t]);
      }
      s = fmaf(ToF(wr[j]), v, s);
    }
    y[idx] = FromF<T>(s);
  }
}

int Grid(int64_t n) {
  const int64_t want = (n + 255) / 256;
  return static_cast<int>(want < 1 ? 1 : (want > 65536 ? 65536 : want));
}

template <typename T>
int Run(kf_ctx* ctx) {
  const kf_tensor& xt = ctx->inputs[0];
  const kf_tensor& wt = ctx->inputs[1];
  kf_tensor& yt = ctx->outputs[0];
  const int rank = ctx->rank, world = ctx->world_size;
  const int64_t b = xt.shape[0], d = xt.shape[1], c = xt.shape[2] / 2, k = wt.shape[1];
  const int64_t rows = b * d, h = k - 1;
  if (h < 1 || c < h) return 1;
  const size_t halo = static_cast<size_t>(rows * h);
  if (ctx->workspace.nbytes < 4 * halo * sizeof(T)) return 1;
  T* send_a = static_cast<T*>(ctx->workspace.data);
  T* send_b = send_a + halo;
  T* recv_a = send_b + halo;
  T* recv_b = recv_a + halo;
  const T* x = static_cast<const T*>(xt.data);

  PackTails<T><<<Grid(rows * h), 256, 0, ctx->stream>>>(x, send_a, send_b, rows, c, h);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_group_start(ctx) != 0) return 1;
  int rc = 0;
  if (rank > 0) {
    rc |= kf_recv(ctx, recv_a, halo, xt.dtype, rank - 1);
    rc |= kf_send(ctx, send_b, halo, xt.dtype, rank - 1);
  }
  if (rank < world - 1) {
    rc |= kf_send(ctx, send_a, halo, xt.dtype, rank + 1);
    rc |= kf_recv(ctx, recv_b, halo, xt.dtype, rank + 1);
  }
  rc |= kf_group_end(ctx);
  if (rc != 0) return 1;
  Conv<T><<<Grid(rows * 2 * c), 256, 0, ctx->stream>>>(x, static_cast<const T*>(wt.data), recv_a,
                                                       recv_b, static_cast<T*>(yt.data), rows, d, c,
                                                       k, rank == 0, rank == world - 1);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_run(kf_ctx* ctx) {
  if (ctx->num_inputs < 2 || ctx->num_outputs < 1 || ctx->inputs[0].ndim != 3) return 1;
  if (ctx->inputs[0].dtype == KF_BF16) return Run<__nv_bfloat16>(ctx);
  if (ctx->inputs[0].dtype == KF_F32) return Run<float>(ctx);
  return 2;
}
