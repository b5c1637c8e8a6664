// Distributed rfft2 baseline, as PhysicsNeMo's DistributedRFFT2 does it with
// PyTorch on cuFFT: torch.fft.fft of the real slab along H (an R2C transform
// whose other half PyTorch fills by conjugate symmetry), the split along H
// made contiguous for the all-to-all (fill and pack here in one pass), the
// all-to-all (NCCL's on real GPUs), the concatenation along N, a C2C FFT
// along N and the truncation to N/2+1 frequencies. norm="ortho" is applied
// once, in the truncation (cuFFT does not scale).
#include <cufft.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

struct State {
  cufftHandle along_h = 0;  // R2C along H of one batch item's columns (strided)
  cufftHandle along_n = 0;  // C2C along N of every row (contiguous)
  bool has_h = false, has_n = false;
};

struct Dims {
  int64_t batch, rows, rows_local, cols_local, cols, half;  // half = H/2 + 1 rows of the R2C
  int world;
};

int64_t Align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// The kernels copy rows: one warp per row (or row segment), lanes along it,
// so that the index arithmetic is paid once per row and accesses coalesce.
__device__ inline int64_t WarpId() {
  return (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
}
__device__ inline int64_t Warps() { return (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5; }

// send[s][b][i][:] = X[b][s*Hl + i][:]: X along H in full, from the R2C's half
// spectrum a[b][0..H/2][:] (X[p] = conj(X[H - p]) for a real input).
__global__ void FillAndPack(const float2* __restrict__ a, float2* __restrict__ send, Dims d) {
  const int lane = threadIdx.x & 31;
  const int64_t segments = d.world * d.batch * d.rows_local;
  for (int64_t g = WarpId(); g < segments; g += Warps()) {
    const int64_t i = g % d.rows_local, b = (g / d.rows_local) % d.batch;
    const int64_t s = g / (d.rows_local * d.batch);
    const int64_t p = s * d.rows_local + i;
    const bool mirrored = p >= d.half;
    const float2* src = a + (b * d.half + (mirrored ? d.rows - p : p)) * d.cols_local;
    float2* dst = send + g * d.cols_local;
    for (int64_t j = lane; j < d.cols_local; j += 32) {
      const float2 v = src[j];
      dst[j] = make_float2(v.x, mirrored ? -v.y : v.y);
    }
  }
}

// rows[b][i][s*Wl + :] = recv[s][b][i][:]: torch.cat of the received blocks along N.
__global__ void Concatenate(const float2* __restrict__ recv, float2* __restrict__ rows, Dims d) {
  const int lane = threadIdx.x & 31;
  const int64_t row_count = d.batch * d.rows_local, segments = row_count * d.world;
  for (int64_t g = WarpId(); g < segments; g += Warps()) {
    const int64_t row = g / d.world, s = g % d.world;
    const float2* src = recv + (s * row_count + row) * d.cols_local;
    float2* dst = rows + row * d.cols + s * d.cols_local;
    for (int64_t j = lane; j < d.cols_local; j += 32) dst[j] = src[j];
  }
}

// y[b][i][k] = rows[b][i][k] / sqrt(H N) for k <= N/2.
__global__ void TruncateAndScale(const float2* __restrict__ rows, float2* __restrict__ y, Dims d,
                                 float scale) {
  const int lane = threadIdx.x & 31;
  const int64_t kept = d.cols / 2 + 1, row_count = d.batch * d.rows_local;
  for (int64_t row = WarpId(); row < row_count; row += Warps()) {
    const float2* src = rows + row * d.cols;
    float2* dst = y + row * kept;
    for (int64_t k = lane; k < kept; k += 32)
      dst[k] = make_float2(src[k].x * scale, src[k].y * scale);
  }
}

// Blocks of 256 threads for one warp per segment.
int Blocks(int64_t segments) {
  const int64_t want = (segments + 7) / 8;
  return static_cast<int>(want < 1 ? 1 : (want > 8192 ? 8192 : want));
}

bool ReadDims(const kf_ctx* ctx, Dims* d) {
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& y = ctx->outputs[0];
  if (x.ndim != 3 || y.ndim != 4 || x.dtype != KF_F32 || y.dtype != KF_F32) return false;
  d->world = ctx->world_size;
  d->batch = x.shape[0];
  d->rows = x.shape[1];
  d->cols_local = x.shape[2];
  d->cols = d->cols_local * d->world;
  d->rows_local = d->rows / d->world;
  d->half = d->rows / 2 + 1;
  return d->rows % d->world == 0 && y.shape[0] == d->batch && y.shape[1] == d->rows_local &&
         y.shape[2] == d->cols / 2 + 1 && y.shape[3] == 2;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  Dims d;
  if (!ReadDims(ctx, &d)) return 1;
  State* st = new State;
  ctx->user = st;
  int n_h[1] = {static_cast<int>(d.rows)};
  int in_embed[1] = {static_cast<int>(d.rows)};
  int out_embed[1] = {static_cast<int>(d.half)};
  const int stride = static_cast<int>(d.cols_local);
  if (cufftPlanMany(&st->along_h, 1, n_h, in_embed, stride, 1, out_embed, stride, 1, CUFFT_R2C,
                    stride) != CUFFT_SUCCESS) {
    return 1;
  }
  st->has_h = true;
  int n_n[1] = {static_cast<int>(d.cols)};
  if (cufftPlanMany(&st->along_n, 1, n_n, nullptr, 1, 0, nullptr, 1, 0, CUFFT_C2C,
                    static_cast<int>(d.batch * d.rows_local)) != CUFFT_SUCCESS) {
    return 1;
  }
  st->has_n = true;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  Dims d;
  if (st == nullptr || !ReadDims(ctx, &d)) return 1;
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  const int64_t half_bytes = Align256(8 * d.batch * d.half * d.cols_local);
  const int64_t block_bytes = Align256(8 * d.batch * d.rows * d.cols_local);
  if (static_cast<int64_t>(ctx->workspace.nbytes) < half_bytes + 2 * block_bytes) return 1;
  char* ws = static_cast<char*>(ctx->workspace.data);
  float2* a = reinterpret_cast<float2*>(ws);
  float2* send = reinterpret_cast<float2*>(ws + half_bytes);
  float2* recv = reinterpret_cast<float2*>(ws + half_bytes + block_bytes);
  float2* rows = send;  // free again once the all-to-all has run

  if (cufftSetStream(st->along_h, ctx->stream) != CUFFT_SUCCESS ||
      cufftSetStream(st->along_n, ctx->stream) != CUFFT_SUCCESS) {
    return 1;
  }
  const float* xs = static_cast<const float*>(x.data);
  for (int64_t b = 0; b < d.batch; ++b) {
    // cuFFT's R2C takes a non-const input pointer but leaves an out-of-place input alone.
    if (cufftExecR2C(st->along_h, const_cast<float*>(xs + b * d.rows * d.cols_local),
                     reinterpret_cast<cufftComplex*>(a + b * d.half * d.cols_local)) !=
        CUFFT_SUCCESS) {
      return 1;
    }
  }
  const int64_t block = d.batch * d.rows_local * d.cols_local;
  FillAndPack<<<Blocks(d.world * d.batch * d.rows_local), 256, 0, ctx->stream>>>(a, send, d);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_to_all(ctx, send, recv, static_cast<size_t>(2 * block), KF_F32) != 0) return 1;
  Concatenate<<<Blocks(d.world * d.batch * d.rows_local), 256, 0, ctx->stream>>>(recv, rows, d);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (cufftExecC2C(st->along_n, reinterpret_cast<cufftComplex*>(rows),
                   reinterpret_cast<cufftComplex*>(rows), CUFFT_FORWARD) != CUFFT_SUCCESS) {
    return 1;
  }
  const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(d.rows * d.cols)));
  TruncateAndScale<<<Blocks(d.batch * d.rows_local), 256, 0, ctx->stream>>>(
      rows, static_cast<float2*>(y.data), d, scale);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (st->has_h && cufftDestroy(st->along_h) != CUFFT_SUCCESS) rc = 1;
  if (st->has_n && cufftDestroy(st->along_n) != CUFFT_SUCCESS) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
