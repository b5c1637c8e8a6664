// Ring attention backward under CP x DP, PKB #57's algorithm (ring-flash-attention's backward
// followed by data parallelism's gradient average) on the harness's point-to-point calls and
// group all-reduce. The CP group is a ring of CP ranks (c -> c+1 in ctx->groups "cp").
//  1. Forward, for out and lse (the task gives neither): CP steps; at step s the rank holds the
//     k/v block of CP rank (c - s) mod CP, passes it on (kf_send to c+1, kf_recv from c-1 into
//     the other receive buffer, one kf_group_start/kf_group_end), attends its queries to it
//     with a flash-style tile kernel (bf16 operands, fp32 accumulation) and merges the block's
//     fp32 (out, lse) into the running pair (update_out_and_lse's sigmoid form).
//     delta_i = dout_i . out_i in fp32.
//  2. Backward: CP steps with the same kv ring; at step s, for the block of rank c - s, one
//     kernel adds the block's dq to an fp32 accumulator and another computes the block's dk, dv,
//     adds the fp32 dk, dv received from c-1 (the other ranks' shares of the same block, zero at
//     s = 0) and sends the sums on to c+1 (the dkv ring). After the last step the rank has
//     received the whole dk, dv of its own block. Both kernels recompute p = exp(s - lse) and
//     ds = p (dout . v - delta) per 64 x 64 tile in plain fp32 (no tensor cores).
//  3. dq, dk, dv rounded to bf16 and averaged over the "dp" pair with kf_group_all_reduce
//     (KF_AVG, in bf16: upstream's .to(dtype) then all_reduce and divide; none at W = 2).
// Everything runs on ctx->stream, so transfers and compute follow one another.
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

struct Dims {
  int64_t b, sq, sk, h, kvh, d;
  int dp;  // d rounded up to 16
};

__host__ __device__ inline int LdH(int dp) { return dp + 8; }  // bf16 q/k/v tiles
__host__ __device__ inline int LdO(int dp) { return dp + 4; }  // fp32 out tile

__host__ __device__ inline size_t Align128(size_t x) { return (x + 127) / 128 * 128; }

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

// rows x dp tile of a [.., len, heads, d] tensor at (batch b, head hh), rows row0.., zero-padded
// past len and past d.
__device__ void LoadTile(bf16* dst, int ld, const bf16* src, const Dims& dm, int64_t len,
                         int64_t heads, int64_t b, int64_t hh, int64_t row0, int dp) {
  const bf16 zero = __float2bfloat16(0.0f);
  if (dm.d % 8 == 0) {
    const int vecs = dp / 8;
    for (int i = threadIdx.x; i < kRows * vecs; i += blockDim.x) {
      const int r = i / vecs, c = (i % vecs) * 8;
      const int64_t row = row0 + r;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (row < len && c < dm.d)
        val = *reinterpret_cast<const uint4*>(src + ((b * len + row) * heads + hh) * dm.d + c);
      *reinterpret_cast<uint4*>(dst + r * ld + c) = val;
    }
  } else {
    for (int i = threadIdx.x; i < kRows * dp; i += blockDim.x) {
      const int r = i / dp, c = i % dp;
      const int64_t row = row0 + r;
      dst[r * ld + c] =
          (row < len && c < dm.d) ? src[((b * len + row) * heads + hh) * dm.d + c] : zero;
    }
  }
}

// Forward, one block: 64 queries of (batch, head); online softmax over the key tiles of one k/v
// block (all keys visible). Writes the normalised fp32 out [B, Sq, H, D] and lse [B, H, Sq].
__global__ void __launch_bounds__(kWarps * 32)
    FlashBlock(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
               float* __restrict__ out, float* __restrict__ lse, Dims dm, float scale) {
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

  LoadTile(qs, ldh, q, dm, dm.sq, dm.h, b, h, q0, dp);
  for (int i = threadIdx.x; i < kRows * ldo; i += blockDim.x) os[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  for (int64_t k0 = 0; k0 < dm.sk; k0 += kKeys) {
    __syncthreads();  // the previous tile's k, v and p are no longer read
    LoadTile(ks, ldh, k, dm, dm.sk, dm.kvh, b, kh, k0, dp);
    LoadTile(vs, ldh, v, dm, dm.sk, dm.kvh, b, kh, k0, dp);
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
      const bool visible = key < dm.sk;
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

  if (qi < dm.sq) {
    const float* orow = os + (warp * 16 + row) * ldo;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float* dst = out + ((b * dm.sq + qi) * dm.h + h) * dm.d;
    for (int c = half; c < dm.d; c += 2) dst[c] = orow[c] * inv;
    if (half == 0) lse[(b * dm.h + h) * dm.sq + qi] = l > 0.0f ? m + logf(l) : -INFINITY;
  }
}

// update_out_and_lse: out -= sigmoid(blse - lse) * (out - bout); lse -= logsigmoid(lse - blse).
// One warp per (batch, query, head) row.
__global__ void MergeBlock(float* __restrict__ out, float* __restrict__ lse,
                           const float* __restrict__ bout, const float* __restrict__ blse,
                           int64_t b, int64_t sq, int64_t h, int64_t d) {
  const int64_t rowid = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (rowid >= b * sq * h) return;
  const int64_t bi = rowid / (sq * h), i = rowid / h % sq, hh = rowid % h;
  float* l = lse + (bi * h + hh) * sq + i;
  const float la = *l, lb = blse[(bi * h + hh) * sq + i];
  __syncwarp();
  if (lb == -INFINITY) return;  // nothing visible in the block
  float wb = 1.0f, merged = lb;
  if (la != -INFINITY) {
    wb = 1.0f / (1.0f + __expf(la - lb));                      // sigmoid(lb - la)
    merged = fmaxf(la, lb) + log1pf(__expf(-fabsf(la - lb)));  // la - logsigmoid(la - lb)
  }
  float* o = out + rowid * d;
  const float* ob = bout + rowid * d;
  for (int64_t c = lane; c < d; c += 32) o[c] -= wb * (o[c] - ob[c]);
  if (lane == 0) *l = merged;
}

__global__ void ToBf16(const float* __restrict__ x, bf16* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16(x[i]);
}

// delta[b, h, i] = dout[b, i, h, :] . out[b, i, h, :] (out in fp32). One warp per row.
__global__ void Delta(const bf16* __restrict__ dout, const float* __restrict__ out,
                      float* __restrict__ delta, int64_t b, int64_t sq, int64_t h, int64_t d) {
  const int64_t rowid = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (rowid >= b * sq * h) return;
  const int64_t bi = rowid / (sq * h), i = rowid / h % sq, hh = rowid % h;
  float acc = 0.0f;
  for (int64_t c = lane; c < d; c += 32)
    acc += __bfloat162float(dout[rowid * d + c]) * out[rowid * d + c];
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) delta[(bi * h + hh) * sq + i] = acc;
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

// 64 rows x d of a [.., len, heads, d] bf16 tensor at (b, hh), rows row0.., as fp32 with row
// stride d + 1; zero past len.
__device__ void LoadF32(float* dst, const bf16* src, int64_t len, int64_t heads, int64_t d,
                        int64_t b, int64_t hh, int64_t row0) {
  for (int64_t i = threadIdx.x; i < kT * d; i += blockDim.x) {
    const int64_t r = i / d, c = i % d, row = row0 + r;
    dst[r * (d + 1) + c] =
        row < len ? __bfloat162float(src[((b * len + row) * heads + hh) * d + c]) : 0.0f;
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

// dq[b, i, h, :] += scale * sum_j ds_ij k_j over the keys of one k/v block, for 64 queries of
// (batch, head) per thread block. dq is fp32 [B, Sq, H, D].
__global__ void __launch_bounds__(kThreads)
    BwdDq(const bf16* __restrict__ q, const bf16* __restrict__ dout, const bf16* __restrict__ k,
          const bf16* __restrict__ v, const float* __restrict__ lse,
          const float* __restrict__ delta, float* __restrict__ dq, Dims dm, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  const BwdSmem lay(dm.d);
  float* qs = reinterpret_cast<float*>(smem + lay.a);
  float* dos = reinterpret_cast<float*>(smem + lay.b);
  float* ks = reinterpret_cast<float*>(smem + lay.c);
  float* vs = reinterpret_cast<float*>(smem + lay.e);
  float* dss = reinterpret_cast<float*>(smem + lay.t1);
  const int64_t q0 = blockIdx.x * kT, h = blockIdx.y, b = blockIdx.z, kh = h / (dm.h / dm.kvh);
  const int ti = threadIdx.x / 16, tj = threadIdx.x % 16;
  LoadF32(qs, q, dm.sq, dm.h, dm.d, b, h, q0);
  LoadF32(dos, dout, dm.sq, dm.h, dm.d, b, h, q0);
  float row_lse[4], row_delta[4];
  for (int i = 0; i < 4; ++i) {
    const int64_t qi = q0 + ti + 16 * i;
    row_lse[i] = qi < dm.sq ? lse[(b * dm.h + h) * dm.sq + qi] : 0.0f;
    row_delta[i] = qi < dm.sq ? delta[(b * dm.h + h) * dm.sq + qi] : 0.0f;
  }
  float acc[4][kCols];
  for (int i = 0; i < 4; ++i)
    for (int m = 0; m < kCols; ++m) acc[i][m] = 0.0f;
  for (int64_t k0 = 0; k0 < dm.sk; k0 += kT) {
    __syncthreads();  // the previous tile's k and ds are no longer read
    LoadF32(ks, k, dm.sk, dm.kvh, dm.d, b, kh, k0);
    LoadF32(vs, v, dm.sk, dm.kvh, dm.d, b, kh, k0);
    __syncthreads();
    float s[4][4], dp[4][4];
    TileDot(s, qs, ks, dm.d);
    TileDot(dp, dos, vs, dm.d);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        const int64_t key = k0 + tj + 16 * j;
        const float p = key < dm.sk ? __expf(s[i][j] * scale - row_lse[i]) : 0.0f;
        dss[(ti + 16 * i) * kLdT + tj + 16 * j] = p * (dp[i][j] - row_delta[i]);
      }
    __syncthreads();
    TileMulAcc(acc, dss, ks, dm.d);
  }
  for (int i = 0; i < 4; ++i) {
    const int64_t qi = q0 + ti + 16 * i;
    if (qi >= dm.sq) continue;
    float* dst = dq + ((b * dm.sq + qi) * dm.h + h) * dm.d;
    for (int m = 0; m < kCols; ++m) {
      const int64_t c = tj + 16 * m;
      if (c < dm.d) dst[c] += scale * acc[i][m];
    }
  }
}

// For 64 keys of (batch, kv head) per thread block, over every query head that reads the kv head
// and every query of this rank: dv_j = sum_i p_ij dout_i, dk_j = scale * sum_i ds_ij q_i. Writes
// dk_out = dk + dk_in (dk_in may be null) and likewise dv; all fp32 [B, Sk, KVH, D].
__global__ void __launch_bounds__(kThreads)
    BwdDkv(const bf16* __restrict__ q, const bf16* __restrict__ dout, const bf16* __restrict__ k,
           const bf16* __restrict__ v, const float* __restrict__ lse,
           const float* __restrict__ delta, const float* __restrict__ dk_in,
           const float* __restrict__ dv_in, float* __restrict__ dk_out, float* __restrict__ dv_out,
           Dims dm, float scale) {
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
  LoadF32(ks, k, dm.sk, dm.kvh, dm.d, b, kh, k0);
  LoadF32(vs, v, dm.sk, dm.kvh, dm.d, b, kh, k0);
  float dk[4][kCols], dv[4][kCols];
  for (int i = 0; i < 4; ++i)
    for (int m = 0; m < kCols; ++m) dk[i][m] = dv[i][m] = 0.0f;
  for (int64_t h = kh * group; h < (kh + 1) * group; ++h)
    for (int64_t q0 = 0; q0 < dm.sq; q0 += kT) {
      __syncthreads();  // the previous tile's q, dout, p and ds are no longer read
      LoadF32(qs, q, dm.sq, dm.h, dm.d, b, h, q0);
      LoadF32(dos, dout, dm.sq, dm.h, dm.d, b, h, q0);
      __syncthreads();
      float s[4][4], dp[4][4];  // [key ti + 16i][query tj + 16j]
      TileDot(s, ks, qs, dm.d);
      TileDot(dp, vs, dos, dm.d);
      for (int j = 0; j < 4; ++j) {
        const int64_t qi = q0 + tj + 16 * j;
        const bool valid = qi < dm.sq;
        const float l = valid ? lse[(b * dm.h + h) * dm.sq + qi] : 0.0f;
        const float dl = valid ? delta[(b * dm.h + h) * dm.sq + qi] : 0.0f;
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
    if (kj >= dm.sk) continue;
    const int64_t row = ((b * dm.sk + kj) * dm.kvh + kh) * dm.d;
    for (int m = 0; m < kCols; ++m) {
      const int64_t c = tj + 16 * m;
      if (c >= dm.d) continue;
      dk_out[row + c] = scale * dk[i][m] + (dk_in != nullptr ? dk_in[row + c] : 0.0f);
      dv_out[row + c] = dv[i][m] + (dv_in != nullptr ? dv_in[row + c] : 0.0f);
    }
  }
}

int Launch(cudaError_t e) { return e == cudaSuccess && cudaGetLastError() == cudaSuccess ? 0 : 1; }

// Sends this rank's a and b (count elements of dt each) to world rank `next` and receives the
// same from `prev` into ra, rb, in one group.
int RingStep(kf_ctx* ctx, const void* a, const void* b, void* ra, void* rb, size_t count,
             kf_dtype dt, int next, int prev) {
  if (kf_group_start(ctx) != 0) return 1;
  if (kf_send(ctx, a, count, dt, next) != 0) return 1;
  if (kf_send(ctx, b, count, dt, next) != 0) return 1;
  if (kf_recv(ctx, ra, count, dt, prev) != 0) return 1;
  if (kf_recv(ctx, rb, count, dt, prev) != 0) return 1;
  return kf_group_end(ctx) != 0 ? 1 : 0;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const kf_tensor* q = kf_input(ctx, "q");
  if (q == nullptr || q->ndim != 4 || q->shape[3] < 1 || q->shape[3] > kMaxD) return 1;
  const int dp = static_cast<int>((q->shape[3] + 15) / 16 * 16);
  const Smem lay(dp);
  const BwdSmem blay(q->shape[3]);
  if (lay.total > ctx->gpu.smem_per_block_optin || blay.total > ctx->gpu.smem_per_block_optin)
    return 1;
  if (cudaFuncSetAttribute(FlashBlock, cudaFuncAttributeMaxDynamicSharedMemorySize,
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
  Dims dm;
  dm.b = q->shape[0];
  dm.sq = dm.sk = q->shape[1];
  dm.h = q->shape[2];
  dm.kvh = k->shape[2];
  dm.d = q->shape[3];
  dm.dp = static_cast<int>((dm.d + 15) / 16 * 16);
  if (dm.kvh < 1 || dm.h % dm.kvh != 0 || dm.d > kMaxD) return 2;
  if (dm.b * dm.sq * dm.h == 0) return 0;
  const kf_group& cp = ctx->groups[cp_idx];
  const int next = cp.ranks[(cp.rank + 1) % cp.size];
  const int prev = cp.ranks[(cp.rank + cp.size - 1) % cp.size];

  // Workspace: two k/v receive buffers (bf16); fp32 running and block out, running and block lse,
  // delta, the dq accumulator, and the dk/dv being sent and received.
  const size_t kv_elems = static_cast<size_t>(k->numel), q_elems = static_cast<size_t>(q->numel);
  const size_t rows = static_cast<size_t>(dm.b * dm.h * dm.sq);
  const size_t kv_bytes = Align128(kv_elems * sizeof(bf16));
  const size_t kvf_bytes = Align128(kv_elems * sizeof(float));
  const size_t qf_bytes = Align128(q_elems * sizeof(float));
  const size_t row_bytes = Align128(rows * sizeof(float));
  if (ctx->workspace.nbytes < 4 * kv_bytes + 3 * qf_bytes + 3 * row_bytes + 4 * kvf_bytes) return 1;
  char* ws = static_cast<char*>(ctx->workspace.data);
  bf16* recv_k[2] = {reinterpret_cast<bf16*>(ws), reinterpret_cast<bf16*>(ws + kv_bytes)};
  bf16* recv_v[2] = {reinterpret_cast<bf16*>(ws + 2 * kv_bytes),
                     reinterpret_cast<bf16*>(ws + 3 * kv_bytes)};
  char* f = ws + 4 * kv_bytes;
  float* acc_out = reinterpret_cast<float*>(f);
  float* blk_out = reinterpret_cast<float*>(f + qf_bytes);
  float* dq_acc = reinterpret_cast<float*>(f + 2 * qf_bytes);
  f += 3 * qf_bytes;
  float* acc_lse = reinterpret_cast<float*>(f);
  float* blk_lse = reinterpret_cast<float*>(f + row_bytes);
  float* delta = reinterpret_cast<float*>(f + 2 * row_bytes);
  f += 3 * row_bytes;
  float* send_dk = reinterpret_cast<float*>(f);
  float* send_dv = reinterpret_cast<float*>(f + kvf_bytes);
  float* recv_dk = reinterpret_cast<float*>(f + 2 * kvf_bytes);
  float* recv_dv = reinterpret_cast<float*>(f + 3 * kvf_bytes);

  const float scale = 1.0f / sqrtf(static_cast<float>(dm.d));
  const bf16* own_k = static_cast<const bf16*>(k->data);
  const bf16* own_v = static_cast<const bf16*>(v->data);
  const bf16* qp = static_cast<const bf16*>(q->data);
  const bf16* dop = static_cast<const bf16*>(dout->data);
  const unsigned warp_blocks = static_cast<unsigned>((rows * 32 + 255) / 256);

  // 1. Forward over the CP group's sequence: out (fp32) and lse, then delta.
  const Smem lay(dm.dp);
  const dim3 fgrid(static_cast<unsigned>((dm.sq + kRows - 1) / kRows), static_cast<unsigned>(dm.h),
                   static_cast<unsigned>(dm.b));
  const bf16* cur_k = own_k;
  const bf16* cur_v = own_v;
  for (int step = 0; step < cp.size; ++step) {
    const bool pass_on = step + 1 < cp.size;
    if (pass_on && RingStep(ctx, cur_k, cur_v, recv_k[step % 2], recv_v[step % 2], kv_elems,
                            KF_BF16, next, prev) != 0)
      return 1;
    const bool first = step == 0;
    FlashBlock<<<fgrid, kWarps * 32, lay.total, ctx->stream>>>(
        qp, cur_k, cur_v, first ? acc_out : blk_out, first ? acc_lse : blk_lse, dm, scale);
    if (Launch(cudaSuccess) != 0) return 1;
    if (!first) {
      MergeBlock<<<warp_blocks, 256, 0, ctx->stream>>>(acc_out, acc_lse, blk_out, blk_lse, dm.b,
                                                       dm.sq, dm.h, dm.d);
      if (Launch(cudaSuccess) != 0) return 1;
    }
    if (pass_on) {
      cur_k = recv_k[step % 2];
      cur_v = recv_v[step % 2];
    }
  }
  Delta<<<warp_blocks, 256, 0, ctx->stream>>>(dop, acc_out, delta, dm.b, dm.sq, dm.h, dm.d);
  if (Launch(cudaSuccess) != 0) return 1;

  // 2. Backward: kv ring and dkv ring.
  const BwdSmem blay(dm.d);
  const dim3 qgrid(static_cast<unsigned>((dm.sq + kT - 1) / kT), static_cast<unsigned>(dm.h),
                   static_cast<unsigned>(dm.b));
  const dim3 kgrid(static_cast<unsigned>((dm.sk + kT - 1) / kT), static_cast<unsigned>(dm.kvh),
                   static_cast<unsigned>(dm.b));
  if (Launch(cudaMemsetAsync(dq_acc, 0, q_elems * sizeof(float), ctx->stream)) != 0) return 1;
  cur_k = own_k;
  cur_v = own_v;
  for (int step = 0; step < cp.size; ++step) {
    const bool pass_on = step + 1 < cp.size;
    if (pass_on && RingStep(ctx, cur_k, cur_v, recv_k[step % 2], recv_v[step % 2], kv_elems,
                            KF_BF16, next, prev) != 0)
      return 1;
    BwdDq<<<qgrid, kThreads, blay.total, ctx->stream>>>(qp, dop, cur_k, cur_v, acc_lse, delta,
                                                        dq_acc, dm, scale);
    if (Launch(cudaSuccess) != 0) return 1;
    // The block's dk, dv plus the shares of the ranks before (received at the last step).
    BwdDkv<<<kgrid, kThreads, blay.total, ctx->stream>>>(
        qp, dop, cur_k, cur_v, acc_lse, delta, step > 0 ? recv_dk : nullptr,
        step > 0 ? recv_dv : nullptr, send_dk, send_dv, dm, scale);
    if (Launch(cudaSuccess) != 0) return 1;
    if (cp.size > 1 &&
        RingStep(ctx, send_dk, send_dv, recv_dk, recv_dv, kv_elems, KF_F32, next, prev) != 0)
      return 1;
    if (pass_on) {
      cur_k = recv_k[step % 2];
      cur_v = recv_v[step % 2];
    }
  }
  // After the last step the dk, dv of this rank's own block are the ones received.
  const float* final_dk = cp.size > 1 ? recv_dk : send_dk;
  const float* final_dv = cp.size > 1 ? recv_dv : send_dv;

  // 3. bf16, then the DP average in place.
  auto to_bf16 = [&](const float* x, kf_tensor* y) {
    const int64_t n = y->numel;
    const unsigned blocks = static_cast<unsigned>(n / 256 + 1 < 4096 ? n / 256 + 1 : 4096);
    ToBf16<<<blocks, 256, 0, ctx->stream>>>(x, static_cast<bf16*>(y->data), n);
    if (Launch(cudaSuccess) != 0) return 1;
    if (ctx->groups[dp_idx].size == 1) return 0;  // W = 2: one replica
    return kf_group_all_reduce(ctx, dp_idx, y->data, y->data, static_cast<size_t>(n), KF_BF16,
                               KF_AVG) != 0
               ? 1
               : 0;
  };
  if (to_bf16(dq_acc, dq) != 0 || to_bf16(final_dk, dk) != 0 || to_bf16(final_dv, dv) != 0)
    return 1;
  return 0;
}
