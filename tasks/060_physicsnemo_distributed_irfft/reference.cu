// Distributed irfft2 baseline, as PhysicsNeMo's DistributedIRFFT2 does it with
// PyTorch on cuFFT: pad the half spectrum along N with the conjugates of its
// own row, all-gather the padded spectrum (NCCL's on real GPUs) to flip the
// padded half along H, keep this rank's rows, a C2C inverse FFT along N, the
// split along N made contiguous for the all-to-all, the all-to-all, the
// concatenation along H, a C2C inverse FFT along H, and the real part.
// norm="ortho" is applied once, with the real part (cuFFT does not scale).
#include <cufft.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

struct State {
  cufftHandle along_n = 0;  // C2C along N of every row (contiguous)
  cufftHandle along_h = 0;  // C2C along H of one (b, c) item's columns (strided)
  bool has_n = false, has_h = false;
};

struct Dims {
  int64_t items, rows, rows_local, cols, cols_local, half;  // items = B * C, half = N/2 + 1
  int world, rank;
};

int64_t Align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

__device__ inline float2 Conj(float2 v) { return make_float2(v.x, -v.y); }

// The copies go by rows: one warp per row (or row segment), lanes along it,
// so that the index arithmetic is paid once per row and accesses coalesce.
__device__ inline int64_t WarpId() {
  return (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
}
__device__ inline int64_t Warps() { return (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5; }

// pad[bc][i][k] = x[bc][i][k] for k <= N/2, conj(x[bc][i][N - k]) above.
__global__ void PadAlongN(const float2* __restrict__ x, float2* __restrict__ pad, Dims d) {
  const int lane = threadIdx.x & 31;
  const int64_t row_count = d.items * d.rows_local;
  for (int64_t row = WarpId(); row < row_count; row += Warps()) {
    const float2* src = x + row * d.half;
    float2* dst = pad + row * d.cols;
    for (int64_t k = lane; k < d.cols; k += 32)
      dst[k] = k < d.half ? src[k] : Conj(src[d.cols - k]);
  }
}

// z[bc][i][k]: this rank's rows p = rank*Hl + i of the gathered, flipped spectrum:
// gathered row p for k <= N/2, row (H - p) mod H above (upstream's flip along H
// of the padded half, then the scatter back to row slabs). gathered is
// [W][items][Hl][N]: row q lives in rank q / Hl's block.
__global__ void FlipAndScatter(const float2* __restrict__ gathered, float2* __restrict__ z,
                               Dims d) {
  const int lane = threadIdx.x & 31;
  const int64_t row_count = d.items * d.rows_local;
  for (int64_t row = WarpId(); row < row_count; row += Warps()) {
    const int64_t i = row % d.rows_local, bc = row / d.rows_local;
    const int64_t p = d.rank * d.rows_local + i, q = (d.rows - p) % d.rows;
    const float2* own =
        gathered + ((p / d.rows_local * d.items + bc) * d.rows_local + p % d.rows_local) * d.cols;
    const float2* mirror =
        gathered + ((q / d.rows_local * d.items + bc) * d.rows_local + q % d.rows_local) * d.cols;
    float2* dst = z + row * d.cols;
    for (int64_t k = lane; k < d.cols; k += 32) dst[k] = k < d.half ? own[k] : mirror[k];
  }
}

// send[s][bc][i][:] = z[bc][i][s*Nl + :]: the split along N, made contiguous.
__global__ void Pack(const float2* __restrict__ z, float2* __restrict__ send, Dims d) {
  const int lane = threadIdx.x & 31;
  const int64_t row_count = d.items * d.rows_local, segments = row_count * d.world;
  for (int64_t g = WarpId(); g < segments; g += Warps()) {
    const int64_t row = g % row_count, s = g / row_count;
    const float2* src = z + row * d.cols + s * d.cols_local;
    float2* dst = send + g * d.cols_local;
    for (int64_t j = lane; j < d.cols_local; j += 32) dst[j] = src[j];
  }
}

// cols[bc][s*Hl + i][:] = recv[s][bc][i][:]: torch.cat of the received blocks along H.
__global__ void Concatenate(const float2* __restrict__ recv, float2* __restrict__ cols, Dims d) {
  const int lane = threadIdx.x & 31;
  const int64_t segments = d.items * d.rows;
  for (int64_t g = WarpId(); g < segments; g += Warps()) {
    const int64_t p = g % d.rows, bc = g / d.rows;
    const int64_t s = p / d.rows_local, i = p % d.rows_local;
    const float2* src = recv + ((s * d.items + bc) * d.rows_local + i) * d.cols_local;
    float2* dst = cols + g * d.cols_local;
    for (int64_t j = lane; j < d.cols_local; j += 32) dst[j] = src[j];
  }
}

__global__ void RealPart(const float2* __restrict__ cols, float* __restrict__ y, int64_t n,
                         float scale) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[idx] = cols[idx].x * scale;
  }
}

// Blocks of 256 threads: n threads, or n segments of one warp each with Blocks(32 * n).
int Blocks(int64_t n) {
  const int64_t want = (n + 255) / 256;
  return static_cast<int>(want < 1 ? 1 : (want > 8192 ? 8192 : want));
}

bool ReadDims(const kf_ctx* ctx, Dims* d) {
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& y = ctx->outputs[0];
  if (x.ndim != 5 || y.ndim != 4 || x.dtype != KF_F32 || y.dtype != KF_F32) return false;
  d->world = ctx->world_size;
  d->rank = ctx->rank;
  d->items = x.shape[0] * x.shape[1];
  d->rows_local = x.shape[2];
  d->half = x.shape[3];
  d->rows = d->rows_local * d->world;
  d->cols = 2 * (d->half - 1);
  d->cols_local = d->cols / d->world;
  return x.shape[4] == 2 && d->cols % d->world == 0 && y.shape[0] == x.shape[0] &&
         y.shape[1] == x.shape[1] && y.shape[2] == d->rows && y.shape[3] == d->cols_local;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  Dims d;
  if (!ReadDims(ctx, &d)) return 1;
  State* st = new State;
  ctx->user = st;
  int n_n[1] = {static_cast<int>(d.cols)};
  if (cufftPlanMany(&st->along_n, 1, n_n, nullptr, 1, 0, nullptr, 1, 0, CUFFT_C2C,
                    static_cast<int>(d.items * d.rows_local)) != CUFFT_SUCCESS) {
    return 1;
  }
  st->has_n = true;
  int n_h[1] = {static_cast<int>(d.rows)};
  const int stride = static_cast<int>(d.cols_local);
  if (cufftPlanMany(&st->along_h, 1, n_h, n_h, stride, 1, n_h, stride, 1, CUFFT_C2C, stride) !=
      CUFFT_SUCCESS) {
    return 1;
  }
  st->has_h = true;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  Dims d;
  if (st == nullptr || !ReadDims(ctx, &d)) return 1;
  const int64_t slab = d.items * d.rows_local * d.cols;  // complex values of a padded row slab
  const int64_t slab_bytes = Align256(8 * slab);
  const int64_t gathered_bytes = Align256(8 * slab * d.world);
  if (static_cast<int64_t>(ctx->workspace.nbytes) < gathered_bytes + 3 * slab_bytes) return 1;
  char* ws = static_cast<char*>(ctx->workspace.data);
  float2* gathered = reinterpret_cast<float2*>(ws);
  float2* pad = reinterpret_cast<float2*>(ws + gathered_bytes);
  float2* send = reinterpret_cast<float2*>(ws + gathered_bytes + slab_bytes);
  float2* recv = reinterpret_cast<float2*>(ws + gathered_bytes + 2 * slab_bytes);
  float2* z = recv;    // this rank's full rows; packed into send before the all-to-all
  float2* cols = pad;  // the column slab; pad is free once gathered

  if (cufftSetStream(st->along_n, ctx->stream) != CUFFT_SUCCESS ||
      cufftSetStream(st->along_h, ctx->stream) != CUFFT_SUCCESS) {
    return 1;
  }
  PadAlongN<<<Blocks(32 * d.items * d.rows_local), 256, 0, ctx->stream>>>(
      static_cast<const float2*>(ctx->inputs[0].data), pad, d);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_gather(ctx, pad, gathered, static_cast<size_t>(2 * slab), KF_F32) != 0) return 1;
  FlipAndScatter<<<Blocks(32 * d.items * d.rows_local), 256, 0, ctx->stream>>>(gathered, z, d);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (cufftExecC2C(st->along_n, reinterpret_cast<cufftComplex*>(z),
                   reinterpret_cast<cufftComplex*>(z), CUFFT_INVERSE) != CUFFT_SUCCESS) {
    return 1;
  }
  Pack<<<Blocks(32 * d.items * d.rows_local * d.world), 256, 0, ctx->stream>>>(z, send, d);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_to_all(ctx, send, recv, static_cast<size_t>(2 * slab / d.world), KF_F32) != 0)
    return 1;
  Concatenate<<<Blocks(32 * d.items * d.rows), 256, 0, ctx->stream>>>(recv, cols, d);
  if (cudaGetLastError() != cudaSuccess) return 1;
  const int64_t item = d.rows * d.cols_local;
  for (int64_t bc = 0; bc < d.items; ++bc) {
    cufftComplex* c = reinterpret_cast<cufftComplex*>(cols + bc * item);
    if (cufftExecC2C(st->along_h, c, c, CUFFT_INVERSE) != CUFFT_SUCCESS) return 1;
  }
  const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(d.rows * d.cols)));
  RealPart<<<Blocks(slab), 256, 0, ctx->stream>>>(cols, static_cast<float*>(ctx->outputs[0].data),
                                                  slab, scale);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (st->has_n && cufftDestroy(st->along_n) != CUFFT_SUCCESS) rc = 1;
  if (st->has_h && cufftDestroy(st->along_h) != CUFFT_SUCCESS) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
