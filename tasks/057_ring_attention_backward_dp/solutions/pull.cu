// Ring attention backward under CP x DP without a ring: every rank reads its CP group's shards
// in place through the peer pointers, so no transfer is serialised with the compute and no fp32
// dk/dv travels. Three barriers (kf_barrier) order the phases:
//  1. start barrier (every rank is in this call, so its inputs are in place and nobody still
//     reads last call's workspace); one forward kernel attends this rank's queries to the whole
//     group's keys (k, v of every CP rank read from the peers, one online softmax over all of
//     them: no per-block merge) and writes lse and delta_i = dout_i . out_i (out is never stored);
//  2. barrier (every rank's lse and delta are published in its workspace); one kernel computes
//     dq of this rank's queries over all the group's keys, and another the dk, dv of this rank's
//     own keys over all the group's queries (q, dout, lse and delta read from the CP peers), so
//     the dk/dv that the ring passes around are computed where they are owned;
//  3. barrier (the DP partner's fp32 gradients are published); each rank averages its fp32
//     dq, dk, dv with its partner's (read in place) and rounds once to bf16.
// The tile kernels are the baseline's (fp32 64 x 64 tiles, bf16 tensor cores in the forward).
#include <cuda_bf16.h>
#include <mma.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int kRows = 64;  // queries per block: 4 warps x 16
constexpr int kKeys = 64;  // keys per tile
constexpr int kWarps = 4;
constexpr int kMaxD = 128;
constexpr int kLdS = kKeys + 4;  // fp32 scores
constexpr int kLdP = kKeys + 8;  // bf16 probabilities
constexpr int kMaxCp = KF_MAX_RANKS;

// A sequence of n = cp * s rows held as cp shards [B, s, heads, D] (bf16), shard o on CP rank o.
struct Seq {
  const bf16* p[kMaxCp];
};
// Per-row fp32 values [B, H, s] of each shard (lse, delta).
struct RowVals {
  const float* p[kMaxCp];
};

struct Dims {
  int64_t b, s, n, h, kvh, d;  // s: rows per shard; n = cp * s: rows of the group
  int dp;                      // d rounded up to 16
};

__host__ __device__ inline int LdH(int dp) { return dp + 8; }  // bf16 q/k/v tiles
__host__ __device__ inline int LdO(int dp) { return dp + 4; }  // fp32 out tile

__host__ __device__ inline size_t Align128(size_t x) { return (x + 127) / 128 * 128; }

// Row u (of the group's sequence, or of shard 0 when len = s) of x at (b, hh).
__device__ inline const bf16* RowPtr(const Seq& x, const Dims& dm, int64_t heads, int64_t b,
                                     int64_t hh, int64_t u) {
  return x.p[u / dm.s] + ((b * dm.s + u % dm.s) * heads + hh) * dm.d;
}
__device__ inline float RowVal(const RowVals& x, const Dims& dm, int64_t b, int64_t h, int64_t u) {
  return x.p[u / dm.s][(b * dm.h + h) * dm.s + u % dm.s];
}

// Shared memory: q, k, v tiles (bf16), scores (fp32), probabilities (bf16), out (fp32).
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

// kRows x dp tile of x at (b, hh), rows row0.. of a sequence of len rows, zero-padded past len and
// past d.
__device__ void LoadTile(bf16* dst, int ld, const Seq& x, const Dims& dm, int64_t len,
                         int64_t heads, int64_t b, int64_t hh, int64_t row0, int dp) {
  const bf16 zero = __float2bfloat16(0.0f);
  if (dm.d % 8 == 0) {
    const int vecs = dp / 8;
    for (int i = threadIdx.x; i < kRows * vecs; i += blockDim.x) {
      const int r = i / vecs, c = (i % vecs) * 8;
      const int64_t row = row0 + r;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (row < len && c < dm.d)
        val = *reinterpret_cast<const uint4*>(RowPtr(x, dm, heads, b, hh, row) + c);
      *reinterpret_cast<uint4*>(dst + r * ld + c) = val;
    }
  } else {
    for (int i = threadIdx.x; i < kRows * dp; i += blockDim.x) {
      const int r = i / dp, c = i % dp;
      const int64_t row = row0 + r;
      dst[r * ld + c] = (row < len && c < dm.d) ? RowPtr(x, dm, heads, b, hh, row)[c] : zero;
    }
  }
}

// Forward, one block: 64 of this rank's queries of (batch, head); one online softmax over the key
// tiles of the whole group's sequence (k, v read from every CP rank). Writes lse [B, H, s] and
// delta = dout . out [B, H, s] (fp32) of its queries; out itself is not needed.
__global__ void __launch_bounds__(kWarps * 32)
    FlashAll(const __grid_constant__ Seq q, const __grid_constant__ Seq k,
             const __grid_constant__ Seq v, const bf16* __restrict__ dout, float* __restrict__ lse,
             float* __restrict__ delta, Dims dm, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int dp = dm.dp, ldh = LdH(dp), ldo = LdO(dp);
  const Smem lay(dp);
  bf16* qs = reinterpret_cast<bf16*>(smem + lay.q);
  bf16* ks = reinterpret_cast<bf16*>(smem + lay.k);
  bf16* vs = reinterpret_cast<bf16*>(smem + lay.v);
  float* ss = reinterpret_cast<float*>(smem + lay.s);
  bf16* ps = reinterpret_cast<bf16*>(smem + lay.p);
  float* os = reinterpret_cast<float*>(smem + lay.o);

  const int64_t q0 = blockIdx.x * kRows;
  const int64_t h = blockIdx.y, b = blockIdx.z, kh = h / (dm.h / dm.kvh);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = lane / 2, half = lane % 2;  // this lane's query row (of the warp's 16)
  const int64_t qi = q0 + warp * 16 + row;    // its index in the shard

  LoadTile(qs, ldh, q, dm, dm.s, dm.h, b, h, q0, dp);
  for (int i = threadIdx.x; i < kRows * ldo; i += blockDim.x) os[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  for (int64_t k0 = 0; k0 < dm.n; k0 += kKeys) {
    __syncthreads();  // the previous tile's k, v and p are no longer read
    LoadTile(ks, ldh, k, dm, dm.n, dm.kvh, b, kh, k0, dp);
    LoadTile(vs, ldh, v, dm, dm.n, dm.kvh, b, kh, k0, dp);
    __syncthreads();

    // Scores of the warp's 16 queries against the 64 keys.
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
      const int64_t key = k0 + j;
      const bool visible = key < dm.n;
      const float x = visible ? srow[j] * scale : -INFINITY;
      srow[j] = x;
      tile_max = fmaxf(tile_max, x);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    float alpha = 1.0f, sum = 0.0f;
    if (m_new != -INFINITY) {
      alpha = __expf(m - m_new);  // 0 while m is -inf
      for (int j = half * 32; j < half * 32 + 32; ++j) {
        const float p = __expf(srow[j] - m_new);  // 0 for masked keys
        const bf16 pb = __float2bfloat16(p);
        prow[j] = pb;
        sum += __bfloat162float(pb);
      }
    } else {
      for (int j = half * 32; j < half * 32 + 32; ++j) prow[j] = __float2bfloat16(0.0f);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    float* orow = os + (warp * 16 + row) * ldo;
    for (int c = half * (dp / 2); c < (half + 1) * (dp / 2); ++c) orow[c] *= alpha;
    __syncwarp();

    // out += p * v for the warp's 16 rows.
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
  __syncthreads();  // out is initialised by all threads, read per row below

  if (qi < dm.s) {
    const float* orow = os + (warp * 16 + row) * ldo;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const bf16* drow = dout + ((b * dm.s + qi) * dm.h + h) * dm.d;
    float dot = 0.0f;
    for (int c = half; c < dm.d; c += 2) dot += __bfloat162float(drow[c]) * orow[c] * inv;
    dot += __shfl_xor_sync(0x3u << (2 * row), dot, 1);
    if (half == 0) {
      lse[(b * dm.h + h) * dm.s + qi] = m + logf(l);
      delta[(b * dm.h + h) * dm.s + qi] = dot;
    }
  }
}

// Backward tiles: 64 x 64 (queries x keys), 256 threads as 16 x 16, each thread owning 4 x 4
// entries of a tile (rows t/16 + 16a, columns t%16 + 16b) and 4 rows x ceil(D/16) columns of a
// 64 x D accumulator. Operands in fp32 shared memory with row stride D + 1 (no bank conflicts).
constexpr int kT = 64;
constexpr int kThreads = 256;
constexpr int kCols = kMaxD / 16;  // accumulator columns per thread at D = 128
constexpr int kLdT = kT + 1;       // fp32 64 x 64 tiles

struct BwdSmem {
  size_t a, b, c, e, t1, t2, total;
  __host__ __device__ explicit BwdSmem(int64_t d) {
    const size_t tile = static_cast<size_t>(kT) * (d + 1) * sizeof(float);
    const size_t sq = static_cast<size_t>(kT) * kLdT * sizeof(float);
    a = 0;
    b = a + Align128(tile);
    c = b + Align128(tile);
    e = c + Align128(tile);
    t1 = e + Align128(tile);
    t2 = t1 + Align128(sq);
    total = t2 + Align128(sq);
  }
};

// 64 rows x d of x at (b, hh), rows row0.. of a sequence of len rows, as fp32 with row stride
// d + 1; zero past len.
__device__ void LoadF32(float* dst, const Seq& x, const Dims& dm, int64_t len, int64_t heads,
                        int64_t b, int64_t hh, int64_t row0) {
  const int64_t d = dm.d;
  for (int64_t i = threadIdx.x; i < kT * d; i += blockDim.x) {
    const int64_t r = i / d, c = i % d, row = row0 + r;
    dst[r * (d + 1) + c] = row < len ? __bfloat162float(RowPtr(x, dm, heads, b, hh, row)[c]) : 0.0f;
  }
}

// x[i][j] = sum_c a[i][c] * b[j][c] for this thread's 4 x 4 entries.
__device__ inline void TileDot(float (&x)[4][4], const float* a, const float* b, int64_t d) {
  const int ti = threadIdx.x / 16, tj = threadIdx.x % 16;
  const int64_t ld = d + 1;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) x[i][j] = 0.0f;
  for (int64_t c = 0; c < d; ++c) {
    float av[4], bv[4];
    for (int i = 0; i < 4; ++i) av[i] = a[(ti + 16 * i) * ld + c];
    for (int j = 0; j < 4; ++j) bv[j] = b[(tj + 16 * j) * ld + c];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) x[i][j] += av[i] * bv[j];
  }
}

// acc[i][m] += sum_j t[row_i][j] * x[j][col_m] over the 64 columns j of t (row stride kLdT) and
// the rows j of x (row stride d + 1); rows of acc are t/16 + 16i, columns t%16 + 16m < d.
__device__ inline void TileMulAcc(float (&acc)[4][kCols], const float* t, const float* x,
                                  int64_t d) {
  const int ti = threadIdx.x / 16, tj = threadIdx.x % 16;
  const int64_t ld = d + 1;
  for (int j = 0; j < kT; ++j) {
    float tv[4];
    for (int i = 0; i < 4; ++i) tv[i] = t[(ti + 16 * i) * kLdT + j];
#pragma unroll
    for (int m = 0; m < kCols; ++m) {
      const int64_t c = tj + 16 * m;
      if (c < d) {
        const float xv = x[j * ld + c];
        for (int i = 0; i < 4; ++i) acc[i][m] += tv[i] * xv;
      }
    }
  }
}

// dq[b, i, h, :] = scale * sum_j ds_ij k_j over all the group's keys, for 64 of this rank's
// queries of (batch, head) per thread block. dq is fp32 [B, s, H, D].
__global__ void __launch_bounds__(kThreads)
    BwdDq(const __grid_constant__ Seq q, const __grid_constant__ Seq dout,
          const __grid_constant__ Seq k, const __grid_constant__ Seq v,
          const float* __restrict__ lse, const float* __restrict__ delta, float* __restrict__ dq,
          Dims dm, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  const BwdSmem lay(dm.d);
  float* qs = reinterpret_cast<float*>(smem + lay.a);
  float* dos = reinterpret_cast<float*>(smem + lay.b);
  float* ks = reinterpret_cast<float*>(smem + lay.c);
  float* vs = reinterpret_cast<float*>(smem + lay.e);
  float* dss = reinterpret_cast<float*>(smem + lay.t1);
  const int64_t q0 = blockIdx.x * kT, h = blockIdx.y, b = blockIdx.z, kh = h / (dm.h / dm.kvh);
  const int ti = threadIdx.x / 16, tj = threadIdx.x % 16;
  LoadF32(qs, q, dm, dm.s, dm.h, b, h, q0);
  LoadF32(dos, dout, dm, dm.s, dm.h, b, h, q0);
  float row_lse[4], row_delta[4];
  for (int i = 0; i < 4; ++i) {
    const int64_t qi = q0 + ti + 16 * i;
    row_lse[i] = qi < dm.s ? lse[(b * dm.h + h) * dm.s + qi] : 0.0f;
    row_delta[i] = qi < dm.s ? delta[(b * dm.h + h) * dm.s + qi] : 0.0f;
  }
  float acc[4][kCols];
  for (int i = 0; i < 4; ++i)
    for (int m = 0; m < kCols; ++m) acc[i][m] = 0.0f;
  for (int64_t k0 = 0; k0 < dm.n; k0 += kT) {
    __syncthreads();  // the previous tile's k and ds are no longer read
    LoadF32(ks, k, dm, dm.n, dm.kvh, b, kh, k0);
    LoadF32(vs, v, dm, dm.n, dm.kvh, b, kh, k0);
    __syncthreads();
    float s[4][4], dp[4][4];
    TileDot(s, qs, ks, dm.d);
    TileDot(dp, dos, vs, dm.d);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        const int64_t key = k0 + tj + 16 * j;
        const float p = key < dm.n ? __expf(s[i][j] * scale - row_lse[i]) : 0.0f;
        dss[(ti + 16 * i) * kLdT + tj + 16 * j] = p * (dp[i][j] - row_delta[i]);
      }
    __syncthreads();
    TileMulAcc(acc, dss, ks, dm.d);
  }
  for (int i = 0; i < 4; ++i) {
    const int64_t qi = q0 + ti + 16 * i;
    if (qi >= dm.s) continue;
    float* dst = dq + ((b * dm.s + qi) * dm.h + h) * dm.d;
    for (int m = 0; m < kCols; ++m) {
      const int64_t c = tj + 16 * m;
      if (c < dm.d) dst[c] = scale * acc[i][m];
    }
  }
}

// For 64 of this rank's keys of (batch, kv head) per thread block, over every query head that
// reads the kv head and every query of the group (q, dout, lse, delta of every CP rank):
// dv_j = sum_i p_ij dout_i, dk_j = scale * sum_i ds_ij q_i, fp32 [B, s, KVH, D].
__global__ void __launch_bounds__(kThreads)
    BwdDkv(const __grid_constant__ Seq q, const __grid_constant__ Seq dout,
           const __grid_constant__ Seq k, const __grid_constant__ Seq v,
           const __grid_constant__ RowVals lse, const __grid_constant__ RowVals delta,
           float* __restrict__ dk_out, float* __restrict__ dv_out, Dims dm, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  const BwdSmem lay(dm.d);
  float* ks = reinterpret_cast<float*>(smem + lay.a);
  float* vs = reinterpret_cast<float*>(smem + lay.b);
  float* qs = reinterpret_cast<float*>(smem + lay.c);
  float* dos = reinterpret_cast<float*>(smem + lay.e);
  float* ps = reinterpret_cast<float*>(smem + lay.t1);   // [key][query]
  float* dss = reinterpret_cast<float*>(smem + lay.t2);  // [key][query]
  const int64_t k0 = blockIdx.x * kT, kh = blockIdx.y, b = blockIdx.z, group = dm.h / dm.kvh;
  const int ti = threadIdx.x / 16, tj = threadIdx.x % 16;
  LoadF32(ks, k, dm, dm.s, dm.kvh, b, kh, k0);
  LoadF32(vs, v, dm, dm.s, dm.kvh, b, kh, k0);
  float dk[4][kCols], dv[4][kCols];
  for (int i = 0; i < 4; ++i)
    for (int m = 0; m < kCols; ++m) dk[i][m] = dv[i][m] = 0.0f;
  for (int64_t h = kh * group; h < (kh + 1) * group; ++h)
    for (int64_t q0 = 0; q0 < dm.n; q0 += kT) {
      __syncthreads();  // the previous tile's q, dout, p and ds are no longer read
      LoadF32(qs, q, dm, dm.n, dm.h, b, h, q0);
      LoadF32(dos, dout, dm, dm.n, dm.h, b, h, q0);
      __syncthreads();
      float s[4][4], dp[4][4];  // [key ti + 16i][query tj + 16j]
      TileDot(s, ks, qs, dm.d);
      TileDot(dp, vs, dos, dm.d);
      for (int j = 0; j < 4; ++j) {
        const int64_t qi = q0 + tj + 16 * j;
        const bool valid = qi < dm.n;
        const float l = valid ? RowVal(lse, dm, b, h, qi) : 0.0f;
        const float dl = valid ? RowVal(delta, dm, b, h, qi) : 0.0f;
        for (int i = 0; i < 4; ++i) {
          const float p = valid ? __expf(s[i][j] * scale - l) : 0.0f;
          ps[(ti + 16 * i) * kLdT + tj + 16 * j] = p;
          dss[(ti + 16 * i) * kLdT + tj + 16 * j] = p * (dp[i][j] - dl);
        }
      }
      __syncthreads();
      TileMulAcc(dv, ps, dos, dm.d);
      TileMulAcc(dk, dss, qs, dm.d);
    }
  for (int i = 0; i < 4; ++i) {
    const int64_t kj = k0 + ti + 16 * i;
    if (kj >= dm.s) continue;
    const int64_t row = ((b * dm.s + kj) * dm.kvh + kh) * dm.d;
    for (int m = 0; m < kCols; ++m) {
      const int64_t c = tj + 16 * m;
      if (c >= dm.d) continue;
      dk_out[row + c] = scale * dk[i][m];
      dv_out[row + c] = dv[i][m];
    }
  }
}

// y = bf16(x) or, with a DP partner, bf16((x + partner's x) / 2), both fp32 read in place.
__global__ void Finish(const float* __restrict__ x, const float* __restrict__ partner,
                       bf16* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16(partner != nullptr ? 0.5f * (x[i] + partner[i]) : x[i]);
}

int Launch() { return cudaGetLastError() == cudaSuccess ? 0 : 1; }

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const kf_tensor* q = kf_input(ctx, "q");
  if (q == nullptr || q->ndim != 4 || q->shape[3] < 1 || q->shape[3] > kMaxD) return 1;
  const int dp = static_cast<int>((q->shape[3] + 15) / 16 * 16);
  const Smem lay(dp);
  const BwdSmem blay(q->shape[3]);
  if (lay.total > ctx->gpu.smem_per_block_optin || blay.total > ctx->gpu.smem_per_block_optin)
    return 1;
  if (cudaFuncSetAttribute(FlashAll, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(lay.total)) != cudaSuccess)
    return 1;
  if (cudaFuncSetAttribute(BwdDq, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(blay.total)) != cudaSuccess)
    return 1;
  return cudaFuncSetAttribute(BwdDkv, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(blay.total)) == cudaSuccess
             ? 0
             : 1;
}

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor *dout = kf_input(ctx, "dout"), *q = kf_input(ctx, "q"), *k = kf_input(ctx, "k"),
                  *v = kf_input(ctx, "v");
  kf_tensor *dq = kf_output(ctx, "dq"), *dk = kf_output(ctx, "dk"), *dv = kf_output(ctx, "dv");
  const int cp_idx = kf_group_index(ctx, "cp"), dp_idx = kf_group_index(ctx, "dp");
  if (dout == nullptr || q == nullptr || k == nullptr || v == nullptr || dq == nullptr ||
      dk == nullptr || dv == nullptr || q->dtype != KF_BF16 || cp_idx < 0 || dp_idx < 0)
    return 2;
  const kf_group& cp = ctx->groups[cp_idx];
  const kf_group& dpg = ctx->groups[dp_idx];
  if (cp.size > kMaxCp) return 2;
  Dims dm;
  dm.b = q->shape[0];
  dm.s = q->shape[1];
  dm.n = dm.s * cp.size;
  dm.h = q->shape[2];
  dm.kvh = k->shape[2];
  dm.d = q->shape[3];
  dm.dp = static_cast<int>((dm.d + 15) / 16 * 16);
  if (dm.kvh < 1 || dm.h % dm.kvh != 0 || dm.d > kMaxD) return 2;
  if (dm.b * dm.s * dm.h == 0) return 0;

  // Workspace (the same offsets on every rank): lse, delta [B, H, s]; dq, dk, dv in fp32.
  const size_t rows = static_cast<size_t>(dm.b * dm.h * dm.s);
  const size_t row_bytes = Align128(rows * sizeof(float));
  const size_t q_bytes = Align128(static_cast<size_t>(q->numel) * sizeof(float));
  const size_t kv_bytes = Align128(static_cast<size_t>(k->numel) * sizeof(float));
  const size_t off_lse = 0, off_delta = row_bytes, off_dq = 2 * row_bytes,
               off_dk = off_dq + q_bytes, off_dv = off_dk + kv_bytes;
  if (ctx->workspace.nbytes < off_dv + kv_bytes) return 1;
  auto ws = [&](int rank, size_t off) {
    return reinterpret_cast<float*>(
        static_cast<char*>(rank == ctx->rank ? ctx->workspace.data : ctx->workspace.peers[rank]) +
        off);
  };
  Seq sq{}, sdout{}, sk{}, sv{};
  RowVals lse{}, delta{};
  for (int o = 0; o < cp.size; ++o) {
    const int r = cp.ranks[o];
    const bool self = r == ctx->rank;
    sq.p[o] = static_cast<const bf16*>(self ? q->data : q->peers[r]);
    sdout.p[o] = static_cast<const bf16*>(self ? dout->data : dout->peers[r]);
    sk.p[o] = static_cast<const bf16*>(self ? k->data : k->peers[r]);
    sv.p[o] = static_cast<const bf16*>(self ? v->data : v->peers[r]);
    lse.p[o] = ws(r, off_lse);
    delta.p[o] = ws(r, off_delta);
  }
  Seq own_q{}, own_dout{}, own_k{}, own_v{};
  own_q.p[0] = static_cast<const bf16*>(q->data);
  own_dout.p[0] = static_cast<const bf16*>(dout->data);
  own_k.p[0] = static_cast<const bf16*>(k->data);
  own_v.p[0] = static_cast<const bf16*>(v->data);
  const float scale = 1.0f / sqrtf(static_cast<float>(dm.d));

  // 1. Every rank is in this call: peers' inputs are in place, last call's workspace is free.
  if (kf_barrier(ctx) != 0) return 1;
  const Smem lay(dm.dp);
  const dim3 qgrid(static_cast<unsigned>((dm.s + kRows - 1) / kRows), static_cast<unsigned>(dm.h),
                   static_cast<unsigned>(dm.b));
  FlashAll<<<qgrid, kWarps * 32, lay.total, ctx->stream>>>(
      own_q, sk, sv, static_cast<const bf16*>(dout->data), ws(ctx->rank, off_lse),
      ws(ctx->rank, off_delta), dm, scale);
  if (Launch() != 0) return 1;

  // 2. Every rank's lse and delta are published.
  if (kf_barrier(ctx) != 0) return 1;
  const BwdSmem blay(dm.d);
  const dim3 tgrid(static_cast<unsigned>((dm.s + kT - 1) / kT), static_cast<unsigned>(dm.h),
                   static_cast<unsigned>(dm.b));
  BwdDq<<<tgrid, kThreads, blay.total, ctx->stream>>>(
      own_q, own_dout, sk, sv, ws(ctx->rank, off_lse), ws(ctx->rank, off_delta),
      ws(ctx->rank, off_dq), dm, scale);
  if (Launch() != 0) return 1;
  const dim3 kgrid(static_cast<unsigned>((dm.s + kT - 1) / kT), static_cast<unsigned>(dm.kvh),
                   static_cast<unsigned>(dm.b));
  BwdDkv<<<kgrid, kThreads, blay.total, ctx->stream>>>(
      sq, sdout, own_k, own_v, lse, delta, ws(ctx->rank, off_dk), ws(ctx->rank, off_dv), dm, scale);
  if (Launch() != 0) return 1;

  // 3. The DP partner's fp32 gradients are published; average and round once.
  const int partner = dpg.size > 1 ? dpg.ranks[1 - dpg.rank] : -1;
  if (partner >= 0 && kf_barrier(ctx) != 0) return 1;
  const kf_tensor* outs[3] = {dq, dk, dv};
  const size_t offs[3] = {off_dq, off_dk, off_dv};
  for (int t = 0; t < 3; ++t) {
    const int64_t n = outs[t]->numel;
    const unsigned blocks = static_cast<unsigned>(n / 256 + 1 < 4096 ? n / 256 + 1 : 4096);
    Finish<<<blocks, 256, 0, ctx->stream>>>(ws(ctx->rank, offs[t]),
                                            partner >= 0 ? ws(partner, offs[t]) : nullptr,
                                            static_cast<bf16*>(outs[t]->data), n);
    if (Launch() != 0) return 1;
  }
  return 0;
}
