// Ulysses attention baseline, PKB #39's flow (VeOmni / DeepSpeed-Ulysses) with the attention over
// the sequence, one step after another on ctx->stream:
//   1. qkv = h @ wqkv^T (cuBLAS, fp32 accumulation, bf16 out) as [B, T, 3, H, D];
//   2. gather_seq_scatter_heads (task 038's layout): pack block p = heads p*hl .. (p+1)*hl-1 of
//      q, k and v (hl = H/W), kf_all_to_all, stack the blocks to [B, S, 3, hl, D];
//   3. non-causal attention of the hl local heads over all S tokens: a flash-style tile kernel
//      (task 054's, bf16 operands, fp32 accumulation and online softmax) writing o [B, S, hl, D];
//   4. gather_heads_scatter_seq (task 037's layout): pack block p = positions p*T .. p*T+T-1,
//      kf_all_to_all, lay the head groups side by side as [B, T, H * D];
//   5. out = that @ wo^T (cuBLAS).
// With B = 1 the packs of step 4 and the stacking of step 2 are the identity and are skipped.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr size_t kCublasWorkspace = 32u << 20;
constexpr int kRows = 64;  // queries per block: 4 warps x 16
constexpr int kKeys = 64;  // keys per tile
constexpr int kWarps = 4;
constexpr int kMaxD = 128;
constexpr int kLdS = kKeys + 4;  // fp32 scores
constexpr int kLdP = kKeys + 8;  // bf16 probabilities

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Layout copies: dst row `row` (c units of U) = src row `from`, rows of one head group (ql).

enum class Move { kPackQkv, kStackQkv, kPackOut, kJoinOut };

struct Lay {
  int64_t b, t;
  int world;
};

template <Move kMode>
__device__ int64_t From(int64_t row, const Lay& l) {
  const int64_t bt = l.b * l.t;
  if constexpr (kMode == Move::kPackQkv) {  // dst [W][B*T][3], src [B*T][3][W]
    const int64_t p = row / (3 * bt);
    return (row - p * 3 * bt) * l.world + p;
  } else if constexpr (kMode == Move::kStackQkv) {  // dst [B][S][3], src [W][B][T][3]
    const int64_t i = row % 3, pos = row / 3 % (l.world * l.t), b = row / 3 / (l.world * l.t);
    const int64_t p = pos / l.t;
    return ((p * l.b + b) * l.t + pos % l.t) * 3 + i;
  } else if constexpr (kMode == Move::kPackOut) {  // dst [W][B][T], src [B][S]
    const int64_t p = row / bt, b = row % bt / l.t, t = row % l.t;
    return b * l.world * l.t + p * l.t + t;
  } else {  // kJoinOut: dst [B*T][W], src [W][B*T]
    return row % l.world * bt + row / l.world;
  }
}

template <typename U, Move kMode>
__global__ void Permute(const U* __restrict__ src, U* __restrict__ dst, Lay l, int64_t rows,
                        int64_t c) {
  for (int64_t row = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    const U* s = src + From<kMode>(row, l) * c;
    U* o = dst + row * c;
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < c;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x)
      o[j] = s[j];
  }
}

template <typename U, Move kMode>
int LaunchPermute(const void* src, void* dst, const Lay& l, int64_t rows, int64_t c,
                  cudaStream_t st) {
  if (rows == 0 || c == 0) return 0;
  const unsigned tx = c >= 256 ? 256 : static_cast<unsigned>((c + 31) / 32 * 32), ty = 256 / tx;
  const int64_t gx = (c + tx - 1) / tx < 64 ? (c + tx - 1) / tx : 64;
  const int64_t gy = (rows + ty - 1) / ty < 65535 ? (rows + ty - 1) / ty : 65535;
  Permute<U, kMode>
      <<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), dim3(tx, ty), 0, st>>>(
          static_cast<const U*>(src), static_cast<U*>(dst), l, rows, c);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

// Rows of ql bf16 elements, moved in the widest unit that divides them.
template <Move kMode>
int Copy(const void* src, void* dst, const Lay& l, int64_t rows, int64_t ql, cudaStream_t st) {
  const int64_t bytes = ql * static_cast<int64_t>(sizeof(bf16));
  if (bytes % 16 == 0) return LaunchPermute<uint4, kMode>(src, dst, l, rows, bytes / 16, st);
  if (bytes % 4 == 0) return LaunchPermute<uint32_t, kMode>(src, dst, l, rows, bytes / 4, st);
  return LaunchPermute<uint16_t, kMode>(src, dst, l, rows, bytes / 2, st);
}

// ---------------------------------------------------------------------------------------------
// Attention: q, k, v rows of [B, S, 3, hl, D] (row stride 3 * hl * D), out [B, S, hl, D].

struct Dims {
  int64_t b, s, hl, d;
  int dp;  // d rounded up to 16
};

__host__ __device__ inline int LdH(int dp) { return dp + 8; }  // bf16 q/k/v tiles
__host__ __device__ inline int LdO(int dp) { return dp + 4; }  // fp32 out tile
__host__ __device__ inline size_t Align128(size_t x) { return (x + 127) / 128 * 128; }

struct Smem {
  size_t q, k, v, s, p, o, total;
  __host__ __device__ explicit Smem(int dp) {
    const size_t tile = static_cast<size_t>(kRows) * LdH(dp) * sizeof(bf16);
    q = 0;
    k = q + Align128(tile);
    v = k + Align128(tile);
    s = v + Align128(tile);
    p = s + Align128(static_cast<size_t>(kRows) * kLdS * sizeof(float));
    o = p + Align128(static_cast<size_t>(kRows) * kLdP * sizeof(bf16));
    total = o + Align128(static_cast<size_t>(kRows) * LdO(dp) * sizeof(float));
  }
};

// kRows x dp tile of head hh of part `which` (0 q, 1 k, 2 v), rows row0.., zero past S and D.
__device__ void LoadTile(bf16* dst, int ld, const bf16* qkv, const Dims& dm, int64_t b, int which,
                         int64_t hh, int64_t row0, int dp) {
  const int64_t stride = 3 * dm.hl * dm.d;
  const bf16* base = qkv + b * dm.s * stride + (which * dm.hl + hh) * dm.d;
  if (dm.d % 8 == 0) {
    const int vecs = dp / 8;
    for (int i = threadIdx.x; i < kRows * vecs; i += blockDim.x) {
      const int r = i / vecs, c = (i % vecs) * 8;
      const int64_t row = row0 + r;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (row < dm.s && c < dm.d) val = *reinterpret_cast<const uint4*>(base + row * stride + c);
      *reinterpret_cast<uint4*>(dst + r * ld + c) = val;
    }
  } else {
    const bf16 zero = __float2bfloat16(0.0f);
    for (int i = threadIdx.x; i < kRows * dp; i += blockDim.x) {
      const int r = i / dp, c = i % dp;
      const int64_t row = row0 + r;
      dst[r * ld + c] = (row < dm.s && c < dm.d) ? base[row * stride + c] : zero;
    }
  }
}

// One block: 64 queries of (batch, local head) against all S keys, online softmax.
__global__ void __launch_bounds__(kWarps * 32)
    Flash(const bf16* __restrict__ qkv, bf16* __restrict__ out, Dims dm, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int dp = dm.dp, ldh = LdH(dp), ldo = LdO(dp);
  const Smem lay(dp);
  bf16* qs = reinterpret_cast<bf16*>(smem + lay.q);
  bf16* ks = reinterpret_cast<bf16*>(smem + lay.k);
  bf16* vs = reinterpret_cast<bf16*>(smem + lay.v);
  float* ss = reinterpret_cast<float*>(smem + lay.s);
  bf16* ps = reinterpret_cast<bf16*>(smem + lay.p);
  float* os = reinterpret_cast<float*>(smem + lay.o);

  const int64_t q0 = blockIdx.x * static_cast<int64_t>(kRows);
  const int64_t h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = lane / 2, half = lane % 2;  // this lane's query row (of the warp's 16)
  const int64_t qi = q0 + warp * 16 + row;

  LoadTile(qs, ldh, qkv, dm, b, 0, h, q0, dp);
  for (int i = threadIdx.x; i < kRows * ldo; i += blockDim.x) os[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  for (int64_t k0 = 0; k0 < dm.s; k0 += kKeys) {
    __syncthreads();  // the previous tile's k, v and p are no longer read
    LoadTile(ks, ldh, qkv, dm, b, 1, h, k0, dp);
    LoadTile(vs, ldh, qkv, dm, b, 2, h, k0, dp);
    __syncthreads();

    for (int n = 0; n < kKeys / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int kk = 0; kk < dp; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, qs + warp * 16 * ldh + kk, ldh);
        wmma::load_matrix_sync(fb, ks + n * 16 * ldh + kk, ldh);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(ss + warp * 16 * kLdS + n * 16, acc, kLdS, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax: two lanes per query row, 32 keys each.
    float* srow = ss + (warp * 16 + row) * kLdS;
    bf16* prow = ps + (warp * 16 + row) * kLdP;
    float tile_max = -INFINITY;
    for (int j = half * 32; j < half * 32 + 32; ++j) {
      const float x = k0 + j < dm.s ? srow[j] * scale : -INFINITY;
      srow[j] = x;
      tile_max = fmaxf(tile_max, x);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);  // finite: every tile holds at least one key
    const float alpha = __expf(m - m_new);   // 0 while m is -inf
    float sum = 0.0f;
    for (int j = half * 32; j < half * 32 + 32; ++j) {
      const bf16 pb = __float2bfloat16(__expf(srow[j] - m_new));  // 0 past S
      prow[j] = pb;
      sum += __bfloat162float(pb);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    float* orow = os + (warp * 16 + row) * ldo;
    for (int c = half * (dp / 2); c < (half + 1) * (dp / 2); ++c) orow[c] *= alpha;
    __syncwarp();

    for (int n = 0; n < dp; n += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, os + warp * 16 * ldo + n, ldo, wmma::mem_row_major);
      for (int kk = 0; kk < kKeys; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, ps + warp * 16 * kLdP + kk, kLdP);
        wmma::load_matrix_sync(fb, vs + kk * ldh + n, ldh);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(os + warp * 16 * ldo + n, acc, ldo, wmma::mem_row_major);
    }
    __syncwarp();
  }
  __syncthreads();

  if (qi < dm.s) {
    const float* orow = os + (warp * 16 + row) * ldo;
    const float inv = 1.0f / l;
    bf16* dst = out + ((b * dm.s + qi) * dm.hl + h) * dm.d;
    for (int c = half; c < dm.d; c += 2) dst[c] = __float2bfloat16(orow[c] * inv);
  }
}

// Row-major y[m, n] = x[m, k] @ w[n, k]^T is column-major y^T = w^T' x^T with w^T' = op_T(w).
int Linear(cublasHandle_t handle, const void* x, const void* w, void* y, int64_t m, int64_t n,
           int64_t k) {
  if (m == 0) return 0;
  const float alpha = 1.0f, beta = 0.0f;
  return cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                      static_cast<int>(k), &alpha, w, CUDA_R_16BF, static_cast<int>(k), x,
                      CUDA_R_16BF, static_cast<int>(k), &beta, y, CUDA_R_16BF, static_cast<int>(n),
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS
             ? 0
             : 1;
}

size_t Align256(size_t x) { return (x + 255) / 256 * 256; }

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  State* st = new State;
  ctx->user = st;
  const kf_tensor* h = kf_input(ctx, "h");
  const int64_t heads = static_cast<int64_t>(kf_param(ctx, "H", 0));
  const int64_t d = static_cast<int64_t>(kf_param(ctx, "D", 0));
  if (h == nullptr || h->ndim != 3 || d < 1 || d > kMaxD || heads < 1 ||
      heads % ctx->world_size != 0 || heads * d != h->shape[2])
    return 1;
  const Smem lay(static_cast<int>((d + 15) / 16 * 16));
  if (lay.total > ctx->gpu.smem_per_block_optin) return 1;
  if (cudaFuncSetAttribute(Flash, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(lay.total)) != cudaSuccess)
    return 1;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor *h = kf_input(ctx, "h"), *wqkv = kf_input(ctx, "wqkv"), *wo = kf_input(ctx, "wo");
  kf_tensor* out = kf_output(ctx, "out");
  if (st == nullptr || h == nullptr || wqkv == nullptr || wo == nullptr || out == nullptr ||
      h->dtype != KF_BF16)
    return 2;
  const int world = ctx->world_size;
  const int64_t b = h->shape[0], t = h->shape[1], hidden = h->shape[2];
  const int64_t heads = static_cast<int64_t>(kf_param(ctx, "H", 0));
  const int64_t d = static_cast<int64_t>(kf_param(ctx, "D", 0));
  const int64_t hl = heads / world, ql = hl * d, s = world * t;
  const Lay lay{b, t, world};
  cudaStream_t stream = ctx->stream;

  // Three regions of [B, T, 3 * hidden].
  const size_t region = Align256(static_cast<size_t>(b * t * 3 * hidden) * sizeof(bf16));
  if (ctx->workspace.nbytes < 3 * region) return 1;
  char* r1 = static_cast<char*>(ctx->workspace.data);
  char* r2 = r1 + region;
  char* r3 = r2 + region;
  const size_t qkv_elems = static_cast<size_t>(b * t * 3 * hidden);
  const size_t o_elems = static_cast<size_t>(b * t * hidden);
  if (cublasSetStream(st->handle, stream) != CUBLAS_STATUS_SUCCESS) return 1;

  // 1. qkv [B*T, 3 * hidden] in r1.
  if (Linear(st->handle, h->data, wqkv->data, r1, b * t, 3 * hidden, hidden) != 0) return 1;
  // 2. Pack to [W][B*T][3][ql] in r2, exchange, stack to [B][S][3][ql] in r1 (B = 1: received
  // there directly).
  if (Copy<Move::kPackQkv>(r1, r2, lay, world * b * t * 3, ql, stream) != 0) return 1;
  char* full = b == 1 ? r1 : r3;
  if (kf_all_to_all(ctx, r2, full == r1 ? r1 : r3, qkv_elems / world, KF_BF16) != 0) return 1;
  if (b != 1) {
    if (Copy<Move::kStackQkv>(r3, r1, lay, b * s * 3, ql, stream) != 0) return 1;
    full = r1;
  }
  // 3. o [B, S, hl, D] in r2.
  Dims dm{b, s, hl, d, static_cast<int>((d + 15) / 16 * 16)};
  const Smem smem(dm.dp);
  if (b * s * hl > 0) {
    const dim3 grid(static_cast<unsigned>((s + kRows - 1) / kRows), static_cast<unsigned>(hl),
                    static_cast<unsigned>(b));
    Flash<<<grid, kWarps * 32, smem.total, stream>>>(reinterpret_cast<const bf16*>(full),
                                                     reinterpret_cast<bf16*>(r2), dm,
                                                     1.0f / sqrtf(static_cast<float>(d)));
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  // 4. Pack to [W][B][T][ql] (B = 1: o already is), exchange into r3, join the head groups as
  // [B*T][W][ql] = [B, T, hidden] in r1.
  char* send = r2;
  if (b != 1) {
    send = r2 + Align256(o_elems * sizeof(bf16));
    if (Copy<Move::kPackOut>(r2, send, lay, world * b * t, ql, stream) != 0) return 1;
  }
  if (kf_all_to_all(ctx, send, r3, o_elems / world, KF_BF16) != 0) return 1;
  if (Copy<Move::kJoinOut>(r3, r1, lay, b * t * world, ql, stream) != 0) return 1;
  // 5. out = o @ wo^T.
  return Linear(st->handle, r1, wo->data, out->data, b * t, hidden, hidden);
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
