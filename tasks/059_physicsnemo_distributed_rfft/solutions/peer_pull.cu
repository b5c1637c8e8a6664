// Distributed rfft2 without the all-to-all's staging: every rank leaves the
// half spectrum of its columns along H (cuFFT R2C) in the symmetric
// workspace, and each rank pulls the rows it owns straight from every peer's
// half spectrum into its row buffer, filling the other half by conjugate
// symmetry and applying the ortho scale on the way. That single pass replaces
// the reference's pack, NCCL all-to-all and concatenation (two full passes
// over the data and the collective's own copies). The batch is cut into
// chunks on two streams, so that pulling chunk c over NVLink and its FFT
// along N overlap the R2C of chunk c + 1.
//
// Synchronisation: the half spectrum alternates between two buffers by call
// parity. A rank pulls a chunk after a barrier kernel on the pull stream has
// seen every peer's signal for that chunk (the peer's R2C of it is done).
// A rank rewrites a buffer two calls later, after the next call's first
// barrier, which no peer passes before it has finished this call's pulls: no
// end barrier is needed.
#include <cufft.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kMaxChunks = 4;
constexpr int kThreads = 256;
constexpr int kUnroll = 4;

struct Dims {
  int64_t batch, rows, rows_local, cols_local, cols, half;  // half = H/2 + 1 rows of the R2C
  int world, rank;
};

struct Peers {
  const float2* half[KF_MAX_RANKS];  // peer s's half spectrum of this call's parity
  uint32_t* pad[KF_MAX_RANKS];
};

struct State {
  cufftHandle along_h = 0, along_n = 0;  // R2C of one item's columns; C2C of a chunk's rows
  bool has_h = false, has_n = false;
  cudaStream_t pull = nullptr;
  cudaEvent_t start = nullptr, done = nullptr, ready[kMaxChunks] = {};
  int chunks = 1;
  uint32_t calls = 0;  // the same on every rank: the harness calls them in step
};

int64_t Align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// Thread p of the one block meets peer p: every peer's R2C of the chunk is done.
__global__ void Barrier(Peers peers, int rank, int world, uint32_t epoch) {
  const int p = threadIdx.x;
  if (p < world && p != rank) {
    __threadfence_system();
    kf_signal(peers.pad[p] + rank, epoch);
    kf_wait(peers.pad[rank] + p, epoch);
  }
}

// One warp per row segment, lanes along it: the index arithmetic is paid once
// per segment and every access coalesces.
__device__ inline int64_t WarpId() {
  return (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
}
__device__ inline int64_t Warps() { return (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5; }

// rows[b][i][s*Wl + :] = scale * X_s[b][rank*Hl + i][:] for the chunk's items b,
// X_s the full spectrum along H of rank s's columns, from its half spectrum
// (X[p] = conj(X[H - p])). Loads bypass L1 (peer memory) and several are in
// flight per lane to cover the NVLink latency.
__global__ void __launch_bounds__(kThreads)
    PullRows(Peers peers, float2* __restrict__ rows, Dims d, int64_t b0, int64_t nb, float scale) {
  const int lane = threadIdx.x & 31;
  const int64_t segments = nb * d.rows_local * d.world;
  for (int64_t g = WarpId(); g < segments; g += Warps()) {
    const int64_t s = g % d.world, row = g / d.world;  // row = (b - b0) * Hl + i
    const int64_t i = row % d.rows_local, b = b0 + row / d.rows_local;
    const int64_t p = d.rank * d.rows_local + i;
    const bool mirrored = p >= d.half;
    const float2* src = peers.half[s] + (b * d.half + (mirrored ? d.rows - p : p)) * d.cols_local;
    float2* dst = rows + (b * d.rows_local + i) * d.cols + s * d.cols_local;
    const float im_scale = mirrored ? -scale : scale;
    for (int64_t j0 = lane; j0 < d.cols_local; j0 += 32 * kUnroll) {
      float2 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = j0 + 32 * u;
        if (j < d.cols_local) v[u] = __ldcg(src + j);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = j0 + 32 * u;
        if (j < d.cols_local) dst[j] = make_float2(v[u].x * scale, v[u].y * im_scale);
      }
    }
  }
}

// y[row][k] = rows[row][k] for k <= N/2, for the chunk's rows.
__global__ void Truncate(const float2* __restrict__ rows, float2* __restrict__ y, int64_t n_rows,
                         int64_t cols) {
  const int lane = threadIdx.x & 31;
  const int64_t kept = cols / 2 + 1;
  for (int64_t row = WarpId(); row < n_rows; row += Warps()) {
    for (int64_t k = lane; k < kept; k += 32) y[row * kept + k] = rows[row * cols + k];
  }
}

// Blocks of kThreads for one warp per segment, at most cap.
int Blocks(int64_t segments, int cap) {
  const int64_t want = (segments + kThreads / 32 - 1) / (kThreads / 32);
  return static_cast<int>(want < 1 ? 1 : (want > cap ? cap : want));
}

bool ReadDims(const kf_ctx* ctx, Dims* d) {
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& y = ctx->outputs[0];
  if (x.ndim != 3 || y.ndim != 4 || x.dtype != KF_F32 || y.dtype != KF_F32) return false;
  if (ctx->world_size < 1 || ctx->world_size > KF_MAX_RANKS) return false;
  d->world = ctx->world_size;
  d->rank = ctx->rank;
  d->batch = x.shape[0];
  d->rows = x.shape[1];
  d->cols_local = x.shape[2];
  d->cols = d->cols_local * d->world;
  d->rows_local = d->rows / d->world;
  d->half = d->rows / 2 + 1;
  return d->rows % d->world == 0 && y.shape[0] == d->batch && y.shape[1] == d->rows_local &&
         y.shape[2] == d->cols / 2 + 1 && y.shape[3] == 2;
}

// The largest chunk count up to kMaxChunks that divides the batch (one C2C plan fits all).
int Chunks(int64_t batch) {
  for (int c = kMaxChunks; c > 1; --c) {
    if (batch % c == 0) return c;
  }
  return 1;
}

void Destroy(State* st) {
  if (st->has_h) cufftDestroy(st->along_h);
  if (st->has_n) cufftDestroy(st->along_n);
  for (cudaEvent_t e : st->ready) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (st->start != nullptr) cudaEventDestroy(st->start);
  if (st->done != nullptr) cudaEventDestroy(st->done);
  if (st->pull != nullptr) cudaStreamDestroy(st->pull);
  delete st;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  Dims d;
  if (!ReadDims(ctx, &d)) return 1;
  if (ctx->signal_pad.nbytes < sizeof(uint32_t) * d.world) return 1;
  State* st = new State;
  st->chunks = Chunks(d.batch);
  bool ok = cudaStreamCreateWithFlags(&st->pull, cudaStreamNonBlocking) == cudaSuccess &&
            cudaEventCreateWithFlags(&st->start, cudaEventDisableTiming) == cudaSuccess &&
            cudaEventCreateWithFlags(&st->done, cudaEventDisableTiming) == cudaSuccess;
  for (int c = 0; ok && c < st->chunks; ++c) {
    ok = cudaEventCreateWithFlags(&st->ready[c], cudaEventDisableTiming) == cudaSuccess;
  }
  int n_h[1] = {static_cast<int>(d.rows)};
  int in_embed[1] = {static_cast<int>(d.rows)};
  int out_embed[1] = {static_cast<int>(d.half)};
  const int stride = static_cast<int>(d.cols_local);
  ok = ok && cufftPlanMany(&st->along_h, 1, n_h, in_embed, stride, 1, out_embed, stride, 1,
                           CUFFT_R2C, stride) == CUFFT_SUCCESS;
  st->has_h = ok;
  int n_n[1] = {static_cast<int>(d.cols)};
  ok = ok && cufftPlanMany(&st->along_n, 1, n_n, nullptr, 1, 0, nullptr, 1, 0, CUFFT_C2C,
                           static_cast<int>(d.batch / st->chunks * d.rows_local)) == CUFFT_SUCCESS;
  st->has_n = ok;
  if (!ok) {
    Destroy(st);
    return 1;
  }
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  Dims d;
  if (st == nullptr || !ReadDims(ctx, &d)) return 1;
  const int64_t half_bytes = Align256(8 * d.batch * d.half * d.cols_local);
  const int64_t rows_bytes = Align256(8 * d.batch * d.rows_local * d.cols);
  if (static_cast<int64_t>(ctx->workspace.nbytes) < 2 * half_bytes + rows_bytes) return 1;
  const int parity = static_cast<int>(st->calls & 1);
  const uint32_t first_epoch = st->calls * static_cast<uint32_t>(st->chunks) + 1;
  st->calls += 1;

  Peers peers;
  for (int s = 0; s < KF_MAX_RANKS; ++s) {
    peers.half[s] = nullptr;
    peers.pad[s] = nullptr;
    if (s < d.world) {
      peers.half[s] = reinterpret_cast<const float2*>(
          static_cast<const char*>(ctx->workspace.peers[s]) + parity * half_bytes);
      peers.pad[s] = static_cast<uint32_t*>(ctx->signal_pad.peers[s]);
    }
  }
  char* ws = static_cast<char*>(ctx->workspace.data);
  float2* mine = reinterpret_cast<float2*>(ws + parity * half_bytes);
  float2* rows = reinterpret_cast<float2*>(ws + 2 * half_bytes);
  float2* y = static_cast<float2*>(ctx->outputs[0].data);
  const float* x = static_cast<const float*>(ctx->inputs[0].data);
  const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(d.rows * d.cols)));

  if (cufftSetStream(st->along_h, ctx->stream) != CUFFT_SUCCESS ||
      cufftSetStream(st->along_n, st->pull) != CUFFT_SUCCESS) {
    return 1;
  }
  // The pull stream starts with this call (outputs and inputs are in place).
  if (cudaEventRecord(st->start, ctx->stream) != cudaSuccess ||
      cudaStreamWaitEvent(st->pull, st->start, 0) != cudaSuccess) {
    return 1;
  }
  const int64_t nb = d.batch / st->chunks;
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  // Emulated ranks share one GPU: leave room for the others' kernels.
  const int cap = ctx->emulated ? 2 * sms / d.world + 1 : 8 * sms;
  for (int c = 0; c < st->chunks; ++c) {
    const int64_t b0 = c * nb;
    for (int64_t b = b0; b < b0 + nb; ++b) {
      // cuFFT's R2C takes a non-const input but leaves an out-of-place input alone.
      if (cufftExecR2C(st->along_h, const_cast<float*>(x + b * d.rows * d.cols_local),
                       reinterpret_cast<cufftComplex*>(mine + b * d.half * d.cols_local)) !=
          CUFFT_SUCCESS) {
        return 1;
      }
    }
    if (cudaEventRecord(st->ready[c], ctx->stream) != cudaSuccess ||
        cudaStreamWaitEvent(st->pull, st->ready[c], 0) != cudaSuccess) {
      return 1;
    }
    Barrier<<<1, 32 * ((d.world + 31) / 32), 0, st->pull>>>(peers, d.rank, d.world,
                                                            first_epoch + static_cast<uint32_t>(c));
    PullRows<<<Blocks(nb * d.rows_local * d.world, cap), kThreads, 0, st->pull>>>(peers, rows, d,
                                                                                  b0, nb, scale);
    if (cudaGetLastError() != cudaSuccess) return 1;
    float2* chunk_rows = rows + b0 * d.rows_local * d.cols;
    if (cufftExecC2C(st->along_n, reinterpret_cast<cufftComplex*>(chunk_rows),
                     reinterpret_cast<cufftComplex*>(chunk_rows), CUFFT_FORWARD) != CUFFT_SUCCESS) {
      return 1;
    }
    const int64_t n_rows = nb * d.rows_local;
    Truncate<<<Blocks(n_rows, cap), kThreads, 0, st->pull>>>(
        chunk_rows, y + b0 * d.rows_local * (d.cols / 2 + 1), n_rows, d.cols);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  // Join: the call ends when the pull stream's work does.
  if (cudaEventRecord(st->done, st->pull) != cudaSuccess ||
      cudaStreamWaitEvent(ctx->stream, st->done, 0) != cudaSuccess) {
    return 1;
  }
  return 0;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (cudaStreamSynchronize(st->pull) != cudaSuccess) rc = 1;
  Destroy(st);
  ctx->user = nullptr;
  return rc;
}
