// DeePMD-kit LKF baseline, fp64: one kernel computes K_i = P_i H_i for the 8
// blocks (a warp per row) and accumulates the local denominator
// 8 lam + sum H_i^T K_i; a harness all-reduce sums it over ranks; one
// elementwise kernel updates the weights (into the workspace) and the
// covariances (in place); a harness all-gather collects every rank's weights.
#include <stdio.h>

#include "kforge/kernel.h"

namespace {

constexpr int kBlocks = 8;

struct Blocks8 {
  const double* h[kBlocks];
  const double* w[kBlocks];
  double* p[kBlocks];
};

// Warp per (block, row): K[b * L + i] = sum_j P_b[i, j] h_b[j].
__global__ void GainVectors(Blocks8 t, int64_t l, double lam, double* k, double* tmp) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  const int lane = threadIdx.x & 31;
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(tmp, kBlocks * lam);
  for (int64_t row = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
       row < kBlocks * l; row += warps) {
    const int b = static_cast<int>(row / l);
    const int64_t i = row % l;
    const double* p = t.p[b] + i * l;
    const double* h = t.h[b];
    double s = 0;
    for (int64_t j = lane; j < l; j += 32) s += p[j] * h[j];
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    if (lane == 0) {
      k[row] = s;
      atomicAdd(tmp, h[i] * s);
    }
  }
}

// w' = w + A err K (into w_out), P' = (P - A K K^T) / lam in place, A = 1 / tmp.
__global__ void Update(Blocks8 t, int64_t l, double lam, const double* k, const double* tmp,
                       const double* err, double* w_out) {
  const double a = 1.0 / *tmp;
  const double e = *err;
  const double inv_lam = 1.0 / lam;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t x = first; x < kBlocks * l; x += stride) {
    w_out[x] = t.w[x / l][x % l] + a * e * k[x];
  }
  const int64_t per = l * l;
  for (int64_t x = first; x < kBlocks * per; x += stride) {
    const int b = static_cast<int>(x / per);
    const int64_t ij = x % per;
    const double* kb = k + b * l;
    t.p[b][ij] = (t.p[b][ij] - a * kb[ij / l] * kb[ij % l]) * inv_lam;
  }
}

int Grid(int64_t threads) {
  int64_t g = (threads + 255) / 256;
  if (g > 2048) g = 2048;
  return g < 1 ? 1 : static_cast<int>(g);
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  Blocks8 t;
  char name[8];
  int64_t l = -1;
  for (int b = 0; b < kBlocks; ++b) {
    snprintf(name, sizeof(name), "H_%d", b);
    const kf_tensor* h = kf_input(ctx, name);
    snprintf(name, sizeof(name), "w_%d", b);
    const kf_tensor* w = kf_input(ctx, name);
    snprintf(name, sizeof(name), "P_%d", b);
    const kf_tensor* p = kf_input(ctx, name);
    if (!h || !w || !p || h->dtype != KF_F64) return 1;
    if (l < 0) l = h->numel;
    if (h->numel != l || w->numel != l || p->numel != l * l) return 1;
    t.h[b] = static_cast<const double*>(h->data);
    t.w[b] = static_cast<const double*>(w->data);
    t.p[b] = static_cast<double*>(p->data);
  }
  const kf_tensor* err = kf_input(ctx, "error");
  kf_tensor* weights = kf_output(ctx, "weights");
  if (!err || !weights) return 1;
  const double lam = kf_param(ctx, "kalman_lambda", 0.98);
  // Workspace: K (8 L), the updated weights (8 L), the denominator.
  double* k = static_cast<double*>(ctx->workspace.data);
  double* w_new = k + kBlocks * l;
  double* tmp = w_new + kBlocks * l;
  if (static_cast<size_t>(2 * kBlocks * l + 1) * sizeof(double) > ctx->workspace.nbytes) return 1;
  cudaStream_t s = ctx->stream;
  if (cudaMemsetAsync(tmp, 0, sizeof(double), s) != cudaSuccess) return 1;
  GainVectors<<<Grid(32 * kBlocks * l), 256, 0, s>>>(t, l, lam, k, tmp);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_reduce(ctx, tmp, tmp, 1, KF_F64, KF_SUM) != 0) return 1;
  Update<<<Grid(kBlocks * l * l), 256, 0, s>>>(t, l, lam, k, tmp,
                                               static_cast<const double*>(err->data), w_new);
  if (cudaGetLastError() != cudaSuccess) return 1;
  return kf_all_gather(ctx, w_new, weights->data, static_cast<size_t>(kBlocks * l), KF_F64);
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
