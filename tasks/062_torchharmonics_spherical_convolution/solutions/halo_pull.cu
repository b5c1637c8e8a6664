// Distributed DISCO convolution by peer reads, output-stationary: every rank computes its own
// output block from the input rows its block needs, so no K-fold partial crosses the links
// (upstream sums partials of B x C/2 x K x Ho x Lo over the polar group).
//
//   1. A start barrier through the signal pad (every peer's inputs are in place).
//   2. For every polar row q and basis k, the range of q's psi entries whose output latitude is
//      in this rank's block (a binary search of q's sorted (k, t) keys, read from the peer).
//   3. The input latitudes those entries read (min and max over them).
//   4. Those rows of the global field, every longitude, pulled from their owners into a local
//      copy of X (the halo: the rank's own rows plus the band the cutoff reaches, whole rings
//      near the poles).
//   5. Y for the block (all channels, all k) from the local rows, the entries staged in shared
//      memory tile by tile.
//   6. bias + weight . Y with cuBLAS (fp32), as the baseline.
// Only peers' inputs are read and only this rank's output and workspace written, so no end
// barrier is needed: a peer's next call cannot pass its start barrier before this call ends.
#include <cublas_v2.h>

#include <climits>
#include <cstdint>

#include "kforge/kernel.h"

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;
constexpr int kThreads = 128;
constexpr int kBc = 4;                       // (b, c) pairs per block of the contraction
constexpr int kLon = 4;                      // output longitudes per thread
constexpr int kLonPerBlock = kThreads * kLon;
constexpr int kTile = 256;                   // psi entries staged at a time

struct Ptrs {
  const void* p[KF_MAX_RANKS];
};

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
  uint32_t* epoch = nullptr;  // start-barrier calls made (device memory)
};

__global__ void StartBarrier(Ptrs pads, int rank, int world, uint32_t* epoch) {
  const uint32_t e = *epoch + 1;
  const int peer = threadIdx.x;
  if (peer < world && peer != rank) {
    kf_signal(static_cast<uint32_t*>(const_cast<void*>(pads.p[peer])) + rank, e);
    kf_wait(static_cast<const uint32_t*>(pads.p[rank]) + peer, e);
  }
  __syncthreads();
  if (threadIdx.x == 0) *epoch = e;
}

__device__ int64_t LowerBound(const int64_t* kk, const int64_t* tt, int64_t n, int64_t ho_all,
                              int64_t key) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (kk[mid] * ho_all + tt[mid] < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// off[(q * K + k) * (ho + 1) + u] = the first entry of polar row q's psi with key >= k * Ho +
// p * ho + u, so entries off[.. u] .. off[.. u + 1] - 1 are output latitude p * ho + u.
__global__ void Offsets(Ptrs idx, Ptrs nnz, int64_t* off, int* range, int a, int64_t polar,
                        int64_t k_count, int64_t ho, int64_t ho_all, int64_t p, int64_t cap) {
  const int64_t total = polar * k_count * (ho + 1);
  const int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (n == 0) {
    range[0] = INT_MAX;
    range[1] = -1;
  }
  if (n >= total) return;
  const int64_t u = n % (ho + 1), k = (n / (ho + 1)) % k_count, q = n / ((ho + 1) * k_count);
  const int64_t* ip = static_cast<const int64_t*>(idx.p[2 * q + a]);
  const int64_t count = *static_cast<const int64_t*>(nnz.p[2 * q + a]);
  off[n] = LowerBound(ip, ip + cap, count, ho_all, k * ho_all + p * ho + u);
}

// range = [min, max] of the global input latitudes the block's entries read.
__global__ void Range(Ptrs idx, const int64_t* off, int* range, int a, int64_t k_count,
                      int64_t ho, int64_t hl, int64_t lon, int64_t cap) {
  const int64_t seg = blockIdx.x, q = seg / k_count;
  const int64_t* cols = static_cast<const int64_t*>(idx.p[2 * q + a]) + 2 * cap;
  int lo = INT_MAX, hi = -1;
  for (int64_t e = off[seg * (ho + 1)] + threadIdx.x; e < off[seg * (ho + 1) + ho];
       e += blockDim.x) {
    const int i = static_cast<int>(q * hl + cols[e] / lon);
    lo = min(lo, i);
    hi = max(hi, i);
  }
  for (int o = 16; o > 0; o >>= 1) {
    lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  if ((threadIdx.x & 31) == 0 && hi >= 0) {
    atomicMin(&range[0], lo);
    atomicMax(&range[1], hi);
  }
}

// xg[bc][i][j] = X[bc][i][j] for the rows in range, from rank 2 * (i / hl) + j / wl.
__global__ void PullRows(Ptrs x, const int* range, float* xg, int64_t bc_count, int64_t h_all,
                         int64_t hl, int64_t wl) {
  const int64_t i = blockIdx.x;
  if (i < range[0] || i > range[1]) return;
  const int64_t q = i / hl, il = i % hl, lon = 2 * wl;
  for (int64_t bc = blockIdx.y; bc < bc_count; bc += gridDim.y) {
    for (int64_t j = threadIdx.x; j < lon; j += blockDim.x) {
      const float* src = static_cast<const float*>(x.p[2 * q + j / wl]);
      xg[(bc * h_all + i) * lon + j] = src[(bc * hl + il) * wl + j % wl];
    }
  }
}

// Block (row = k * ho + u, group of kBc (b, c), chunk of output longitudes):
// y[bc][k][u][l] = sum over every polar row's entries (k, p * ho + u) of
// v * X[bc][i][(j + (a * wo + l) * ps) mod L].
__global__ void Contract(Ptrs idx, Ptrs vals, const int64_t* off, const float* xg, float* y,
                         int a, int64_t polar, int64_t bc_count, int64_t k_count, int64_t ho,
                         int64_t wo, int64_t h_all, int64_t hl, int64_t lon, int64_t ps,
                         int64_t cap) {
  __shared__ int64_t s_row[kTile];  // (global input latitude) * L
  __shared__ int s_col[kTile];
  __shared__ float s_val[kTile];
  const int64_t row = blockIdx.x, k = row / ho, u = row % ho;
  const int64_t l0 = blockIdx.z * static_cast<int64_t>(kLonPerBlock);
  for (int64_t bc0 = blockIdx.y * static_cast<int64_t>(kBc); bc0 < bc_count;
       bc0 += static_cast<int64_t>(gridDim.y) * kBc) {
    float acc[kBc][kLon];
#pragma unroll
    for (int m = 0; m < kBc; ++m)
#pragma unroll
      for (int n = 0; n < kLon; ++n) acc[m][n] = 0.f;
    int64_t lg[kLon];  // global output longitude * ps, mod L
#pragma unroll
    for (int n = 0; n < kLon; ++n)
      lg[n] = ((a * wo + l0 + threadIdx.x + n * kThreads) * ps) % lon;
    for (int64_t q = 0; q < polar; ++q) {
      const int64_t seg = (q * k_count + k) * (ho + 1) + u;
      const int64_t* cols = static_cast<const int64_t*>(idx.p[2 * q + a]) + 2 * cap;
      const float* vp = static_cast<const float*>(vals.p[2 * q + a]);
      for (int64_t e0 = off[seg]; e0 < off[seg + 1]; e0 += kTile) {
        const int n_tile = static_cast<int>(min(static_cast<int64_t>(kTile), off[seg + 1] - e0));
        __syncthreads();
        for (int e = threadIdx.x; e < n_tile; e += blockDim.x) {
          const int64_t s = cols[e0 + e];
          s_row[e] = (q * hl + s / lon) * lon;
          s_col[e] = static_cast<int>(s % lon);
          s_val[e] = vp[e0 + e];
        }
        __syncthreads();
        for (int e = 0; e < n_tile; ++e) {
          const float v = s_val[e];
          const int64_t r0 = s_row[e];
          const int c0 = s_col[e];
#pragma unroll
          for (int n = 0; n < kLon; ++n) {
            int64_t col = c0 + lg[n];
            if (col >= lon) col -= lon;
#pragma unroll
            for (int m = 0; m < kBc; ++m) {
              if (bc0 + m < bc_count) acc[m][n] += v * xg[(bc0 + m) * h_all * lon + r0 + col];
            }
          }
        }
      }
    }
#pragma unroll
    for (int m = 0; m < kBc; ++m) {
      if (bc0 + m >= bc_count) break;
#pragma unroll
      for (int n = 0; n < kLon; ++n) {
        const int64_t l = l0 + threadIdx.x + n * kThreads;
        if (l < wo) y[(((bc0 + m) * k_count + k) * ho + u) * wo + l] = acc[m][n];
      }
    }
  }
}

__global__ void FillBias(const float* bias, float* out, int64_t b_count, int64_t o_count,
                         int64_t n_pix) {
  const int64_t total = b_count * o_count * n_pix;
  for (int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; n < total;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[n] = bias[(n / n_pix) % o_count];
}

int Blocks(int64_t total, int64_t per) {
  const int64_t b = (total + per - 1) / per;
  return static_cast<int>(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

char* Carve(char** at, size_t bytes) {
  char* p = *at;
  *at += (bytes + 255) / 256 * 256;
  return p;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  State* st = new State;
  ctx->user = st;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    return 1;
  if (cudaMalloc(&st->epoch, sizeof(uint32_t)) != cudaSuccess) return 1;
  if (cudaMemset(st->epoch, 0, sizeof(uint32_t)) != cudaSuccess) return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor* x = kf_input(ctx, "x");
  const kf_tensor* idx = kf_input(ctx, "psi_idx");
  const kf_tensor* vals = kf_input(ctx, "psi_vals");
  const kf_tensor* nnz = kf_input(ctx, "psi_nnz");
  const kf_tensor* weight = kf_input(ctx, "weight");
  const kf_tensor* bias = kf_input(ctx, "bias");
  kf_tensor* out = kf_output(ctx, "out");
  const int az = kf_group_index(ctx, "azimuth"), po = kf_group_index(ctx, "polar");
  if (st == nullptr || x == nullptr || idx == nullptr || vals == nullptr || nnz == nullptr ||
      weight == nullptr || bias == nullptr || out == nullptr || az < 0 || po < 0)
    return 1;
  const int a = ctx->groups[az].rank;
  const int64_t p = ctx->groups[po].rank, polar = ctx->groups[po].size;
  const int64_t b_count = x->shape[0], c_all = x->shape[1], hl = x->shape[2], wl = x->shape[3];
  const int64_t o_count = weight->shape[0], cg = weight->shape[1], k_count = weight->shape[2];
  const int64_t ho = out->shape[2], wo = out->shape[3], cap = idx->shape[1];
  const int64_t lon = 2 * wl, h_all = hl * polar, ho_all = ho * polar, ps = lon / (2 * wo);
  const int64_t groups = c_all / cg, og = o_count / groups, bc_count = b_count * c_all;
  const int64_t n_pix = ho * wo;

  char* at = static_cast<char*>(ctx->workspace.data);
  float* xg = reinterpret_cast<float*>(
      Carve(&at, static_cast<size_t>(bc_count * h_all * lon) * sizeof(float)));
  float* y = reinterpret_cast<float*>(
      Carve(&at, static_cast<size_t>(bc_count * k_count * n_pix) * sizeof(float)));
  int64_t* off = reinterpret_cast<int64_t*>(
      Carve(&at, static_cast<size_t>(polar * k_count * (ho + 1)) * sizeof(int64_t)));
  int* range = reinterpret_cast<int*>(Carve(&at, 2 * sizeof(int)));
  if (at > static_cast<char*>(ctx->workspace.data) + ctx->workspace.nbytes) return 3;

  Ptrs pads{}, xp{}, ip{}, vp{}, np{};
  for (int r = 0; r < ctx->world_size; ++r) {
    pads.p[r] = ctx->signal_pad.peers[r];
    xp.p[r] = x->peers[r];
    ip.p[r] = idx->peers[r];
    vp.p[r] = vals->peers[r];
    np.p[r] = nnz->peers[r];
  }
  cudaStream_t s = ctx->stream;
  StartBarrier<<<1, 32, 0, s>>>(pads, ctx->rank, ctx->world_size, st->epoch);
  const int64_t n_off = polar * k_count * (ho + 1);
  Offsets<<<Blocks(n_off, 128), 128, 0, s>>>(ip, np, off, range, a, polar, k_count, ho, ho_all,
                                             p, cap);
  Range<<<static_cast<unsigned>(polar * k_count), 256, 0, s>>>(ip, off, range, a, k_count, ho,
                                                               hl, lon, cap);
  const dim3 pull_grid(static_cast<unsigned>(h_all),
                       static_cast<unsigned>(bc_count < 1024 ? bc_count : 1024));
  PullRows<<<pull_grid, 256, 0, s>>>(xp, range, xg, bc_count, h_all, hl, wl);
  const int64_t bc_blocks = (bc_count + kBc - 1) / kBc;
  const dim3 grid(static_cast<unsigned>(k_count * ho),
                  static_cast<unsigned>(bc_blocks < 65535 ? bc_blocks : 65535),
                  static_cast<unsigned>((wo + kLonPerBlock - 1) / kLonPerBlock));
  Contract<<<grid, kThreads, 0, s>>>(ip, vp, off, xg, y, a, polar, bc_count, k_count, ho, wo,
                                     h_all, hl, lon, ps, cap);
  float* od = static_cast<float*>(out->data);
  FillBias<<<Blocks(b_count * o_count * n_pix, 256), 256, 0, s>>>(
      static_cast<const float*>(bias->data), od, b_count, o_count, n_pix);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (cublasSetStream(st->handle, s) != CUBLAS_STATUS_SUCCESS) return 1;
  const float one = 1.0f;
  const float* wd = static_cast<const float*>(weight->data);
  for (int64_t g = 0; g < groups; ++g) {
    // Row-major out[b][g*og..][n_pix] = W_g[og][cg*K] . y[b][g*cg*K..][n_pix], as column-major
    // out^T = y^T W_g^T (see the baseline).
    if (cublasSgemmStridedBatched(
            st->handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n_pix), static_cast<int>(og),
            static_cast<int>(cg * k_count), &one, y + g * cg * k_count * n_pix,
            static_cast<int>(n_pix), c_all * k_count * n_pix, wd + g * og * cg * k_count,
            static_cast<int>(cg * k_count), 0, &one, od + g * og * n_pix, static_cast<int>(n_pix),
            o_count * n_pix, static_cast<int>(b_count)) != CUBLAS_STATUS_SUCCESS)
      return 1;
  }
  return cudaGetLastError() != cudaSuccess;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = 0;
  if (st->handle != nullptr && cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  if (st->cublas_ws != nullptr && cudaFree(st->cublas_ws) != cudaSuccess) rc = 1;
  if (st->epoch != nullptr && cudaFree(st->epoch) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
