// Causal ring attention baseline, PKB #54's algorithm (ring-flash-attention's forward) on the
// harness's point-to-point calls. W steps; at step s rank r holds the k/v block of rank
// (r - s) mod W and
//   1. passes it on: kf_send to rank r+1 and kf_recv from rank r-1 into the other receive buffer
//      (one kf_group_start/kf_group_end, PKB's batch_isend_irecv),
//   2. if s <= r (the block is not in the future), attends its queries to it with a flash-style
//      tile kernel (bf16 operands, fp32 accumulation; causal inside the block only at s = 0),
//      writing the block's fp32 (out, lse),
//   3. merges that pair into the running fp32 (out, lse) (update_out_and_lse's sigmoid form).
// Finally the running out is rounded to bf16. Everything runs on ctx->stream, so each step's
// transfer and compute follow one another.
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

// One block: 64 queries of (batch, head); online softmax over the key tiles of one k/v block.
// Writes the normalised fp32 out [B, Sq, H, D] and lse [B, H, Sq] (-inf where no key is visible).
// causal: key j is visible to query i iff j <= i (the block on the diagonal).
__global__ void __launch_bounds__(kWarps * 32)
    FlashBlock(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
               float* __restrict__ out, float* __restrict__ lse, Dims dm, float scale, int causal) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int dp = dm.dp, ldh = LdH(dp), ldo = LdO(dp);
  const Smem lay(dp);
  bf16* qs = reinterpret_cast<bf16*>(smem + lay.q);
  bf16* ks = reinterpret_cast<bf16*>(smem + lay.k);
  bf16* vs = reinterpret_cast<bf16*>(smem + lay.v);
  float* ss = reinterpret_cast<float*>(smem + lay.s);
  bf16* ps = reinterpret_cast<bf16*>(smem + lay.p);
  float* os = reinterpret_cast<float*>(smem + lay.o);

  const int64_t tiles = (dm.sq + kRows - 1) / kRows;
  const int64_t q0 = (tiles - 1 - blockIdx.x) * kRows;  // the longest (causal) tiles first
  const int64_t h = blockIdx.y, b = blockIdx.z, kh = h / (dm.h / dm.kvh);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = lane / 2, half = lane % 2;  // this lane's query row (of the warp's 16)
  const int64_t qi = q0 + warp * 16 + row;    // its index in the shard

  LoadTile(qs, ldh, q, dm, dm.sq, dm.h, b, h, q0, dp);
  for (int i = threadIdx.x; i < kRows * ldo; i += blockDim.x) os[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  int64_t last_key = dm.sk - 1;
  if (causal) last_key = min(last_key, min(q0 + kRows - 1, dm.sq - 1));
  for (int64_t k0 = 0; k0 <= last_key; k0 += kKeys) {
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
      const bool visible = key < dm.sk && (!causal || key <= qi);
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

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const kf_tensor* q = kf_input(ctx, "q");
  if (q == nullptr || q->ndim != 4 || q->shape[3] < 1 || q->shape[3] > kMaxD) return 1;
  const int dp = static_cast<int>((q->shape[3] + 15) / 16 * 16);
  const Smem lay(dp);
  if (lay.total > ctx->gpu.smem_per_block_optin) return 1;
  return cudaFuncSetAttribute(FlashBlock, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(lay.total)) == cudaSuccess
             ? 0
             : 1;
}

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor *q = kf_input(ctx, "q"), *k = kf_input(ctx, "k"), *v = kf_input(ctx, "v");
  kf_tensor* out = kf_output(ctx, "out");
  if (q == nullptr || k == nullptr || v == nullptr || out == nullptr || q->dtype != KF_BF16)
    return 2;
  Dims dm;
  dm.b = q->shape[0];
  dm.sq = dm.sk = q->shape[1];
  dm.h = q->shape[2];
  dm.kvh = k->shape[2];
  dm.d = q->shape[3];
  dm.dp = static_cast<int>((dm.d + 15) / 16 * 16);
  if (dm.kvh < 1 || dm.h % dm.kvh != 0 || dm.d > kMaxD) return 2;
  const int world = ctx->world_size, rank = ctx->rank;
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;

  // Workspace: two k/v receive buffers, then running and block (out, lse) in fp32.
  const size_t kv_elems = static_cast<size_t>(k->numel);
  const size_t kv_bytes = Align128(kv_elems * sizeof(bf16));
  const size_t out_bytes = Align128(static_cast<size_t>(q->numel) * sizeof(float));
  const size_t lse_bytes = Align128(static_cast<size_t>(dm.b * dm.h * dm.sq) * sizeof(float));
  char* ws = static_cast<char*>(ctx->workspace.data);
  if (ctx->workspace.nbytes < 4 * kv_bytes + 2 * out_bytes + 2 * lse_bytes) return 1;
  bf16* recv_k[2] = {reinterpret_cast<bf16*>(ws), reinterpret_cast<bf16*>(ws + kv_bytes)};
  bf16* recv_v[2] = {reinterpret_cast<bf16*>(ws + 2 * kv_bytes),
                     reinterpret_cast<bf16*>(ws + 3 * kv_bytes)};
  char* f = ws + 4 * kv_bytes;
  float* acc_out = reinterpret_cast<float*>(f);
  float* blk_out = reinterpret_cast<float*>(f + out_bytes);
  float* acc_lse = reinterpret_cast<float*>(f + 2 * out_bytes);
  float* blk_lse = reinterpret_cast<float*>(f + 2 * out_bytes + lse_bytes);

  const Smem lay(dm.dp);
  const dim3 grid(static_cast<unsigned>((dm.sq + kRows - 1) / kRows), static_cast<unsigned>(dm.h),
                  static_cast<unsigned>(dm.b));
  const float scale = 1.0f / sqrtf(static_cast<float>(dm.d));
  const bf16* cur_k = static_cast<const bf16*>(k->data);
  const bf16* cur_v = static_cast<const bf16*>(v->data);
  for (int step = 0; step < world; ++step) {
    const bool pass_on = step + 1 < world;
    if (pass_on) {
      if (kf_group_start(ctx) != 0) return 1;
      if (kf_send(ctx, cur_k, kv_elems, KF_BF16, next) != 0) return 1;
      if (kf_send(ctx, cur_v, kv_elems, KF_BF16, next) != 0) return 1;
      if (kf_recv(ctx, recv_k[step % 2], kv_elems, KF_BF16, prev) != 0) return 1;
      if (kf_recv(ctx, recv_v[step % 2], kv_elems, KF_BF16, prev) != 0) return 1;
      if (kf_group_end(ctx) != 0) return 1;
    }
    if (step <= rank) {  // the block of rank - step: not in the future
      const bool first = step == 0;
      if (dm.sq > 0 && dm.h > 0 && dm.b > 0) {
        FlashBlock<<<grid, kWarps * 32, lay.total, ctx->stream>>>(
            static_cast<const bf16*>(q->data), cur_k, cur_v, first ? acc_out : blk_out,
            first ? acc_lse : blk_lse, dm, scale, first ? 1 : 0);
        if (cudaGetLastError() != cudaSuccess) return 1;
      }
      if (!first) {
        const int64_t rows = dm.b * dm.sq * dm.h;
        const unsigned blocks = static_cast<unsigned>((rows * 32 + 255) / 256);
        if (blocks > 0) {
          MergeBlock<<<blocks, 256, 0, ctx->stream>>>(acc_out, acc_lse, blk_out, blk_lse, dm.b,
                                                      dm.sq, dm.h, dm.d);
          if (cudaGetLastError() != cudaSuccess) return 1;
        }
      }
    }
    if (pass_on) {
      cur_k = recv_k[step % 2];
      cur_v = recv_v[step % 2];
    }
  }
  const int64_t n = q->numel;
  if (n > 0) {
    const unsigned blocks = static_cast<unsigned>(n / 256 + 1 < 4096 ? n / 256 + 1 : 4096);
    ToBf16<<<blocks, 256, 0, ctx->stream>>>(acc_out, static_cast<bf16*>(out->data), n);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  return 0;
}
