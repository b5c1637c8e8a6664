// Distributed irfft2 without gathering the spectrum. The result only needs,
// per row p and output column n, S[p, n] = sum_{k <= N/2} c_k X[p, k] e^{+2 pi i k n / N}
// with c_0 = c_{N/2} = 1 and c_k = 2 between: the conjugate-padded half
// contributes conj(P[-p, n]) (P the same sum over 0 < k < N/2), and under the
// real part of the inverse along H, sum_p e^{i phi(p)} conj(P[-p]) has the same
// real part as sum_p e^{i phi(p)} P[p]. So upstream's all-gather of the whole
// padded spectrum (to flip it along H) is not needed: each rank weights its
// rows, inverse-FFTs them along N (C2C of length N, upper half zero), and every
// rank pulls its columns of all rows from the peers' results, folding rows p
// and H - p into the Hermitian half V[p] = (S[p] + conj(S[H - p])) / 2, whose
// C2R along H is exactly Re(sum_p e^{i phi(p)} S[p]), written straight into y.
// The batch (B * C items) is cut into chunks on two streams so that pulling a
// chunk over NVLink and its C2R overlap the next chunk's FFT along N.
//
// Synchronisation: each rank's S alternates between two buffers by call
// parity. A rank pulls a chunk after a barrier kernel on the pull stream has
// seen every peer's signal for it (the peer's FFT of the chunk is done); a
// rank rewrites a buffer two calls later, after the next call's barriers,
// which no peer passes before finishing this call's pulls.
#include <cufft.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kMaxChunks = 4;
constexpr int kThreads = 256;
constexpr int kUnroll = 4;

struct Dims {
  int64_t items, rows, rows_local, cols, cols_local, half;  // items = B * C, half = N/2 + 1
  int world, rank;
};

struct Peers {
  const float2* s[KF_MAX_RANKS];  // peer r's S of this call's parity: [items][Hl][N]
  uint32_t* pad[KF_MAX_RANKS];
};

struct State {
  cufftHandle along_n = 0, along_h = 0;  // C2C along N of a chunk's rows; C2R along H of one item
  bool has_n = false, has_h = false;
  cudaStream_t pull = nullptr;
  cudaEvent_t start = nullptr, done = nullptr, ready[kMaxChunks] = {};
  int chunks = 1;
  uint32_t calls = 0;  // the same on every rank: the harness calls them in step
};

int64_t Align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

__device__ inline int64_t WarpId() {
  return (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
}
__device__ inline int64_t Warps() { return (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5; }

// u[row][k] = c_k x[row][k] for k <= N/2, 0 above; one warp per row.
__global__ void WeightAndPad(const float2* __restrict__ x, float2* __restrict__ u, int64_t n_rows,
                             int64_t cols, int64_t half) {
  const int lane = threadIdx.x & 31;
  for (int64_t row = WarpId(); row < n_rows; row += Warps()) {
    const float2* src = x + row * half;
    float2* dst = u + row * cols;
    for (int64_t k = lane; k < cols; k += 32) {
      float2 v = make_float2(0.f, 0.f);
      if (k < half) {
        v = src[k];
        if (k != 0 && k != half - 1) v = make_float2(2.f * v.x, 2.f * v.y);
      }
      dst[k] = v;
    }
  }
}

// Thread p of the one block meets peer p: every peer's S of the chunk is ready.
__global__ void Barrier(Peers peers, int rank, int world, uint32_t epoch) {
  const int p = threadIdx.x;
  if (p < world && p != rank) {
    __threadfence_system();
    kf_signal(peers.pad[p] + rank, epoch);
    kf_wait(peers.pad[rank] + p, epoch);
  }
}

// v[bc][p][:] = scale / 2 * (S[bc][p][cols of rank] + conj(S[bc][(H - p) mod H][cols of rank]))
// for p <= H/2, rows of S living on rank row / Hl. One warp per (item, p).
__global__ void __launch_bounds__(kThreads) PullAndFold(Peers peers, float2* __restrict__ v, Dims d,
                                                        int64_t bc0, int64_t nbc, float scale) {
  const int lane = threadIdx.x & 31;
  const int64_t hh = d.rows / 2 + 1;
  const int64_t segments = nbc * hh;
  const float f = 0.5f * scale;
  for (int64_t g = WarpId(); g < segments; g += Warps()) {
    const int64_t p = g % hh, bc = bc0 + g / hh;
    const int64_t q = (d.rows - p) % d.rows;
    const float2* a = peers.s[p / d.rows_local] + (bc * d.rows_local + p % d.rows_local) * d.cols +
                      d.rank * d.cols_local;
    const float2* b = peers.s[q / d.rows_local] + (bc * d.rows_local + q % d.rows_local) * d.cols +
                      d.rank * d.cols_local;
    float2* dst = v + (bc * hh + p) * d.cols_local;
    for (int64_t j0 = lane; j0 < d.cols_local; j0 += 32 * kUnroll) {
      float2 va[kUnroll], vb[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = j0 + 32 * u;
        if (j < d.cols_local) {
          va[u] = __ldcg(a + j);
          vb[u] = __ldcg(b + j);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = j0 + 32 * u;
        if (j < d.cols_local)
          dst[j] = make_float2(f * (va[u].x + vb[u].x), f * (va[u].y - vb[u].y));
      }
    }
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
  if (x.ndim != 5 || y.ndim != 4 || x.dtype != KF_F32 || y.dtype != KF_F32) return false;
  if (ctx->world_size < 1 || ctx->world_size > KF_MAX_RANKS) return false;
  d->world = ctx->world_size;
  d->rank = ctx->rank;
  d->items = x.shape[0] * x.shape[1];
  d->rows_local = x.shape[2];
  d->half = x.shape[3];
  d->rows = d->rows_local * d->world;
  d->cols = 2 * (d->half - 1);
  d->cols_local = d->cols / d->world;
  return x.shape[4] == 2 && d->cols % d->world == 0 && d->rows % 2 == 0 &&
         y.shape[0] == x.shape[0] && y.shape[1] == x.shape[1] && y.shape[2] == d->rows &&
         y.shape[3] == d->cols_local;
}

// The largest chunk count up to kMaxChunks that divides the items (one plan fits all).
int Chunks(int64_t items) {
  for (int c = kMaxChunks; c > 1; --c) {
    if (items % c == 0) return c;
  }
  return 1;
}

void Destroy(State* st) {
  if (st->has_n) cufftDestroy(st->along_n);
  if (st->has_h) cufftDestroy(st->along_h);
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
  st->chunks = Chunks(d.items);
  bool ok = cudaStreamCreateWithFlags(&st->pull, cudaStreamNonBlocking) == cudaSuccess &&
            cudaEventCreateWithFlags(&st->start, cudaEventDisableTiming) == cudaSuccess &&
            cudaEventCreateWithFlags(&st->done, cudaEventDisableTiming) == cudaSuccess;
  for (int c = 0; ok && c < st->chunks; ++c) {
    ok = cudaEventCreateWithFlags(&st->ready[c], cudaEventDisableTiming) == cudaSuccess;
  }
  int n_n[1] = {static_cast<int>(d.cols)};
  ok = ok && cufftPlanMany(&st->along_n, 1, n_n, nullptr, 1, 0, nullptr, 1, 0, CUFFT_C2C,
                           static_cast<int>(d.items / st->chunks * d.rows_local)) == CUFFT_SUCCESS;
  st->has_n = ok;
  int n_h[1] = {static_cast<int>(d.rows)};
  int in_embed[1] = {static_cast<int>(d.rows / 2 + 1)};
  int out_embed[1] = {static_cast<int>(d.rows)};
  const int stride = static_cast<int>(d.cols_local);
  ok = ok && cufftPlanMany(&st->along_h, 1, n_h, in_embed, stride, 1, out_embed, stride, 1,
                           CUFFT_C2R, stride) == CUFFT_SUCCESS;
  st->has_h = ok;
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
  const int64_t hh = d.rows / 2 + 1;
  const int64_t s_bytes = Align256(8 * d.items * d.rows_local * d.cols);
  const int64_t v_bytes = Align256(8 * d.items * hh * d.cols_local);
  if (static_cast<int64_t>(ctx->workspace.nbytes) < 2 * s_bytes + v_bytes) return 1;
  const int parity = static_cast<int>(st->calls & 1);
  const uint32_t first_epoch = st->calls * static_cast<uint32_t>(st->chunks) + 1;
  st->calls += 1;

  Peers peers;
  for (int r = 0; r < KF_MAX_RANKS; ++r) {
    peers.s[r] = nullptr;
    peers.pad[r] = nullptr;
    if (r < d.world) {
      peers.s[r] = reinterpret_cast<const float2*>(
          static_cast<const char*>(ctx->workspace.peers[r]) + parity * s_bytes);
      peers.pad[r] = static_cast<uint32_t*>(ctx->signal_pad.peers[r]);
    }
  }
  char* ws = static_cast<char*>(ctx->workspace.data);
  float2* mine = reinterpret_cast<float2*>(ws + parity * s_bytes);
  float2* v = reinterpret_cast<float2*>(ws + 2 * s_bytes);
  const float2* x = static_cast<const float2*>(ctx->inputs[0].data);
  float* y = static_cast<float*>(ctx->outputs[0].data);
  const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(d.rows * d.cols)));

  if (cufftSetStream(st->along_n, ctx->stream) != CUFFT_SUCCESS ||
      cufftSetStream(st->along_h, st->pull) != CUFFT_SUCCESS) {
    return 1;
  }
  // The pull stream starts with this call (outputs and inputs are in place).
  if (cudaEventRecord(st->start, ctx->stream) != cudaSuccess ||
      cudaStreamWaitEvent(st->pull, st->start, 0) != cudaSuccess) {
    return 1;
  }
  const int64_t nbc = d.items / st->chunks;
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  // Emulated ranks share one GPU: leave room for the others' kernels.
  const int cap = ctx->emulated ? 2 * sms / d.world + 1 : 8 * sms;
  for (int c = 0; c < st->chunks; ++c) {
    const int64_t bc0 = c * nbc;
    const int64_t n_rows = nbc * d.rows_local;
    float2* chunk = mine + bc0 * d.rows_local * d.cols;
    WeightAndPad<<<Blocks(n_rows, cap), kThreads, 0, ctx->stream>>>(x + bc0 * d.rows_local * d.half,
                                                                    chunk, n_rows, d.cols, d.half);
    if (cudaGetLastError() != cudaSuccess) return 1;
    if (cufftExecC2C(st->along_n, reinterpret_cast<cufftComplex*>(chunk),
                     reinterpret_cast<cufftComplex*>(chunk), CUFFT_INVERSE) != CUFFT_SUCCESS) {
      return 1;
    }
    if (cudaEventRecord(st->ready[c], ctx->stream) != cudaSuccess ||
        cudaStreamWaitEvent(st->pull, st->ready[c], 0) != cudaSuccess) {
      return 1;
    }
    Barrier<<<1, 32 * ((d.world + 31) / 32), 0, st->pull>>>(peers, d.rank, d.world,
                                                            first_epoch + static_cast<uint32_t>(c));
    PullAndFold<<<Blocks(nbc * hh, cap), kThreads, 0, st->pull>>>(peers, v, d, bc0, nbc, scale);
    if (cudaGetLastError() != cudaSuccess) return 1;
    for (int64_t bc = bc0; bc < bc0 + nbc; ++bc) {
      if (cufftExecC2R(st->along_h, reinterpret_cast<cufftComplex*>(v + bc * hh * d.cols_local),
                       y + bc * d.rows * d.cols_local) != CUFFT_SUCCESS) {
        return 1;
      }
    }
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
