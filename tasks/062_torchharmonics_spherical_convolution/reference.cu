// Distributed DISCO convolution baseline, as torch-harmonics' DistributedDiscreteContinuousConvS2
// runs it: (1) an all-to-all over the azimuth pair (send/recv) that trades the partner's channel
// half of x for this rank's channel half of the partner's longitudes; (2) the sparse contraction
// of the rank's polar slice of psi, for every output longitude (upstream's roll loop: the input
// read at longitude (j + l * pscale) mod L), into a partial Y over all Ho output latitudes, laid
// out latitude-major so that (3) a harness reduce-scatter over the polar group leaves each rank
// the sum for its own latitudes; (4) the all-to-all back over the azimuth pair (longitudes split
// again, all channels); (5) the bias, then one cuBLAS fp32 GEMM per channel group for the weight
// contraction over (channel, basis), batched over B (upstream's einsum).
#include <cublas_v2.h>

#include <cstdint>

#include "kforge/kernel.h"

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;
constexpr int kThreads = 128;
constexpr int kBcPerBlock = 4;

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
};

// xcat[bc][i][L]: this rank's channels, every longitude; its own half from x, the partner's
// half from what arrived.
__global__ void Concat(const float* x, const float* recv, float* xcat, int64_t b_count,
                       int64_t c_all, int64_t c_lo, int64_t c_me, int64_t hl, int64_t wl, int a) {
  const int64_t total = b_count * c_me * hl * 2 * wl;
  for (int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; n < total;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t lon = n % (2 * wl), i = (n / (2 * wl)) % hl, c = (n / (2 * wl * hl)) % c_me,
                  b = n / (2 * wl * hl * c_me);
    const int half = static_cast<int>(lon / wl);
    const int64_t j = lon % wl;
    xcat[n] = half == a ? x[((b * c_all + c_lo + c) * hl + i) * wl + j]
                        : recv[((b * c_me + c) * hl + i) * wl + j];
  }
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

// Block (row = k * Ho + t, chunk of bc): ypart[t][bc][k][l] = sum over the row's nonzeros of
// v * xcat[bc][i][(j + l * ps) mod L], for every output longitude l.
__global__ void Contract(const float* xcat, const int64_t* idx, const float* vals,
                         const int64_t* nnz, int64_t cap, float* ypart, int64_t bc_count,
                         int64_t k_count, int64_t ho_all, int64_t hl, int64_t lon, int64_t lo_out,
                         int64_t ps) {
  const int64_t row = blockIdx.x, k = row / ho_all, t = row % ho_all;
  __shared__ int64_t range[2];
  if (threadIdx.x < 2) {
    const int64_t n = *nnz;
    range[threadIdx.x] = LowerBound(idx, idx + cap, n, ho_all, row + threadIdx.x);
  }
  __syncthreads();
  const int64_t* cols = idx + 2 * cap;
  for (int64_t bc = blockIdx.y * static_cast<int64_t>(kBcPerBlock);
       bc < bc_count && bc < (blockIdx.y + 1) * static_cast<int64_t>(kBcPerBlock); ++bc) {
    const float* xb = xcat + bc * hl * lon;
    float* yr = ypart + ((t * bc_count + bc) * k_count + k) * lo_out;
    for (int64_t l = threadIdx.x; l < lo_out; l += blockDim.x) {
      float acc = 0.f;
      for (int64_t e = range[0]; e < range[1]; ++e) {
        const int64_t s = cols[e];
        acc += vals[e] * xb[(s / lon) * lon + (s % lon + l * ps) % lon];
      }
      yr[l] = acc;
    }
  }
}

// yfull[b][c][k][t][l] (all channels, this rank's latitudes and longitudes) from the reduced
// partial (own channels, every longitude) and what the partner sent (its channels).
__global__ void Gather(const float* yrs, const float* recv, float* yfull, int64_t b_count,
                       int64_t c_all, int64_t k_count, int64_t ho, int64_t wo, int64_t c_lo_me,
                       int64_t c_me, int64_t c_lo_peer, int64_t c_peer, int a) {
  const int64_t total = b_count * c_all * k_count * ho * wo;
  for (int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; n < total;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t l = n % wo, t = (n / wo) % ho, k = (n / (wo * ho)) % k_count,
                  c = (n / (wo * ho * k_count)) % c_all, b = n / (wo * ho * k_count * c_all);
    float v;
    if (c >= c_lo_me && c < c_lo_me + c_me)
      v = yrs[(((t * b_count + b) * c_me + c - c_lo_me) * k_count + k) * 2 * wo + a * wo + l];
    else
      v = recv[(((t * b_count + b) * c_peer + c - c_lo_peer) * k_count + k) * wo + l];
    yfull[n] = v;
  }
}

__global__ void FillBias(const float* bias, float* out, int64_t b_count, int64_t o_count,
                         int64_t n_pix) {
  const int64_t total = b_count * o_count * n_pix;
  for (int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; n < total;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[n] = bias[(n / n_pix) % o_count];
}

int Blocks(int64_t total) {
  const int64_t b = (total + 255) / 256;
  return static_cast<int>(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

// torch-harmonics' compute_split_shapes for two chunks: ceil(n/2) first, unless that leaves the
// second empty (n = 1: [0, 1]).
void SplitTwo(int64_t n, int64_t* first, int64_t* second) {
  int64_t chunk = (n + 1) / 2;
  if (n - chunk <= 0) chunk = n / 2;
  *first = chunk;
  *second = n - chunk;
}

float* Carve(char** at, int64_t floats) {
  float* p = reinterpret_cast<float*>(*at);
  *at += (static_cast<size_t>(floats) * sizeof(float) + 255) / 256 * 256;
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
  const kf_group& azg = ctx->groups[az];
  const int a = azg.rank, peer = azg.ranks[1 - a];
  const int64_t polar = ctx->groups[po].size;
  const int64_t b_count = x->shape[0], c_all = x->shape[1], hl = x->shape[2], wl = x->shape[3];
  const int64_t o_count = weight->shape[0], cg = weight->shape[1], k_count = weight->shape[2];
  const int64_t ho = out->shape[2], wo = out->shape[3], cap = idx->shape[1];
  const int64_t lon = 2 * wl, ho_all = ho * polar, lo_out = 2 * wo, ps = lon / lo_out;
  const int64_t groups = c_all / cg, og = o_count / groups;
  int64_t c0, c1;
  SplitTwo(c_all, &c0, &c1);
  const int64_t c_me = a == 0 ? c0 : c1, c_peer = a == 0 ? c1 : c0;
  const int64_t c_lo_me = a == 0 ? 0 : c0, c_lo_peer = a == 0 ? c0 : 0;

  char* at = static_cast<char*>(ctx->workspace.data);
  float* send_a = Carve(&at, b_count * c_peer * hl * wl);
  float* recv_a = Carve(&at, b_count * c_me * hl * wl);
  float* xcat = Carve(&at, b_count * c_me * hl * lon);
  float* ypart = Carve(&at, ho_all * b_count * c_me * k_count * lo_out);
  float* yrs = polar > 1 ? Carve(&at, ho * b_count * c_me * k_count * lo_out) : ypart;
  float* send_b = Carve(&at, ho * b_count * c_me * k_count * wo);
  float* recv_b = Carve(&at, ho * b_count * c_peer * k_count * wo);
  float* yfull = Carve(&at, b_count * c_all * k_count * ho * wo);
  if (at > static_cast<char*>(ctx->workspace.data) + ctx->workspace.nbytes) return 3;
  cudaStream_t s = ctx->stream;
  const float* xd = static_cast<const float*>(x->data);

  // (1) The partner's channel half of x out, this rank's channel half of its longitudes in.
  if (b_count * c_peer * hl * wl > 0 &&
      cudaMemcpy2DAsync(send_a, c_peer * hl * wl * sizeof(float), xd + c_lo_peer * hl * wl,
                        c_all * hl * wl * sizeof(float), c_peer * hl * wl * sizeof(float), b_count,
                        cudaMemcpyDeviceToDevice, s) != cudaSuccess)
    return 1;
  if (kf_group_start(ctx) != 0) return 1;
  if (b_count * c_peer * hl * wl > 0 &&
      kf_send(ctx, send_a, b_count * c_peer * hl * wl, KF_F32, peer) != 0)
    return 1;
  if (b_count * c_me * hl * wl > 0 &&
      kf_recv(ctx, recv_a, b_count * c_me * hl * wl, KF_F32, peer) != 0)
    return 1;
  if (kf_group_end(ctx) != 0) return 1;

  const int64_t bc = b_count * c_me;
  if (bc > 0) {
    Concat<<<Blocks(bc * hl * lon), 256, 0, s>>>(xd, recv_a, xcat, b_count, c_all, c_lo_me, c_me,
                                                 hl, wl, a);
    // (2) The rank's polar slice of psi, at every output longitude.
    const dim3 grid(static_cast<unsigned>(k_count * ho_all),
                    static_cast<unsigned>((bc + kBcPerBlock - 1) / kBcPerBlock));
    Contract<<<grid, kThreads, 0, s>>>(xcat, static_cast<const int64_t*>(idx->data),
                                       static_cast<const float*>(vals->data),
                                       static_cast<const int64_t*>(nnz->data), cap, ypart, bc,
                                       k_count, ho_all, hl, lon, lo_out, ps);
    if (cudaGetLastError() != cudaSuccess) return 1;
    // (3) Sum over the polar group; each rank keeps its own output latitudes.
    if (polar > 1 && kf_group_reduce_scatter(ctx, po, ypart, yrs, ho * bc * k_count * lo_out,
                                             KF_F32, KF_SUM) != 0)
      return 1;
    // (4) The partner's longitudes out (rows of wo at pitch Lo).
    if (cudaMemcpy2DAsync(send_b, wo * sizeof(float), yrs + (1 - a) * wo, lo_out * sizeof(float),
                          wo * sizeof(float), ho * bc * k_count, cudaMemcpyDeviceToDevice,
                          s) != cudaSuccess)
      return 1;
  }
  if (kf_group_start(ctx) != 0) return 1;
  if (bc > 0 && kf_send(ctx, send_b, ho * bc * k_count * wo, KF_F32, peer) != 0) return 1;
  if (b_count * c_peer > 0 &&
      kf_recv(ctx, recv_b, ho * b_count * c_peer * k_count * wo, KF_F32, peer) != 0)
    return 1;
  if (kf_group_end(ctx) != 0) return 1;
  Gather<<<Blocks(b_count * c_all * k_count * ho * wo), 256, 0, s>>>(
      yrs, recv_b, yfull, b_count, c_all, k_count, ho, wo, c_lo_me, c_me, c_lo_peer, c_peer, a);

  // (5) out = bias + weight . Y, per channel group, batched over B.
  const int64_t n_pix = ho * wo;
  float* od = static_cast<float*>(out->data);
  FillBias<<<Blocks(b_count * o_count * n_pix), 256, 0, s>>>(static_cast<const float*>(bias->data),
                                                             od, b_count, o_count, n_pix);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (cublasSetStream(st->handle, s) != CUBLAS_STATUS_SUCCESS) return 1;
  const float one = 1.0f;
  const float* wd = static_cast<const float*>(weight->data);
  for (int64_t g = 0; g < groups; ++g) {
    // Row-major out[b][g*og..][n_pix] = W_g[og][cg*K] . Y[b][g*cg*K..][n_pix] is column-major
    // out^T = Y^T W_g^T: Y^T is column-major [n_pix, cg*K] (ld n_pix), W_g^T [cg*K, og] (ld cg*K).
    if (cublasSgemmStridedBatched(
            st->handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n_pix), static_cast<int>(og),
            static_cast<int>(cg * k_count), &one, yfull + g * cg * k_count * n_pix,
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
  delete st;
  ctx->user = nullptr;
  return rc;
}
