// MAGI-1 CSO attention baseline: PKB #77's schedule on the harness's kf_all_to_all.
//   1. kv all-to-all: rank p receives, from every rank, its slices of all ranges for the kv
//      heads of head group p (PKB's _redistribute_kv; with KVH < W a kv head goes to W/KVH
//      ranks). The keys of a k_range are then read in place from the received slices.
//   2. R + 2 messages, each one kf_all_to_all: message m carries the queries of range m
//      (head group p to rank p; m < R) and the outputs of range m - 2 (back to the rank that
//      holds those tokens; m >= 2), the two packed along the last dimension as PKB's
//      torch.cat([q_chunks[idx + 1], prev_out], dim=-1). Message m + 1 is sent before range m
//      is attended, PKB's order.
//   3. Range m is attended with a flash-style tile kernel (bf16 operands, fp32 accumulation)
//      that writes its bf16 output straight into message m + 2's send buffer; the received
//      outputs are unpacked into out at the end.
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
  int64_t w, r, s, c;  // world, ranges, slice tokens, clip
  int64_t lh, lkv, g;  // local query heads, local kv heads, query heads per kv head
  int64_t d;
  int dp;  // d rounded up to 16
};

__host__ __device__ inline int LdH(int dp) { return dp + 8; }  // bf16 q/k/v tiles
__host__ __device__ inline int LdO(int dp) { return dp + 4; }  // fp32 out tile
__host__ __device__ inline size_t Align256(size_t x) { return (x + 255) / 256 * 256; }

// Shared memory: q, k, v tiles (bf16), scores (fp32), probabilities (bf16), out (fp32), and the
// offsets of the tile's key rows.
struct Smem {
  size_t q, k, v, s, p, o, rows, total;
  __host__ __device__ explicit Smem(int dp) {
    const size_t tile = static_cast<size_t>(kRows) * LdH(dp) * sizeof(bf16);
    q = 0;
    k = q + Align256(tile);
    v = k + Align256(tile);
    s = v + Align256(tile);
    p = s + Align256(static_cast<size_t>(kRows) * kLdS * sizeof(float));
    o = p + Align256(static_cast<size_t>(kRows) * kLdP * sizeof(bf16));
    rows = o + Align256(static_cast<size_t>(kRows) * LdO(dp) * sizeof(float));
    total = rows + Align256(kKeys * sizeof(int64_t));
  }
};

// A kRows x dp tile: row i (i < valid) starts at src + off[i], zero-padded past d and past valid.
__device__ void LoadTile(bf16* dst, int ld, const bf16* src, const int64_t* off, int valid, int d,
                         int dp) {
  const bf16 zero = __float2bfloat16(0.0f);
  if (d % 8 == 0) {
    const int vecs = dp / 8;
    for (int i = threadIdx.x; i < kRows * vecs; i += blockDim.x) {
      const int r = i / vecs, c = (i % vecs) * 8;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (r < valid && c < d) val = *reinterpret_cast<const uint4*>(src + off[r] + c);
      *reinterpret_cast<uint4*>(dst + r * ld + c) = val;
    }
  } else {
    for (int i = threadIdx.x; i < kRows * dp; i += blockDim.x) {
      const int r = i / dp, c = i % dp;
      dst[r * ld + c] = (r < valid && c < d) ? src[off[r] + c] : zero;
    }
  }
}

// One block: 64 queries of one local head of range `range`, over the keys of its k_range.
// Queries: row t (of W*S) of local head j at qbuf[(t * lh + j) * qld]; outputs go to
// obuf[(t * lh + j) * old] in bf16. Key x of the clipped sequence is token u = x % C of range
// x / C, received from rank u / S: kv[(((u / S) * R + x / C) * S + u % S) * lkv + kj] * 2D.
__global__ void __launch_bounds__(kWarps * 32)
    FlashRange(const bf16* __restrict__ qbuf, int64_t qld, bf16* __restrict__ obuf, int64_t old,
               const bf16* __restrict__ kv, const int64_t* __restrict__ k_ranges, int range,
               Dims dm, float scale) {
  extern __shared__ __align__(256) unsigned char smem[];
  const int dp = dm.dp, ldh = LdH(dp), ldo = LdO(dp), d = static_cast<int>(dm.d);
  const Smem lay(dp);
  bf16* qs = reinterpret_cast<bf16*>(smem + lay.q);
  bf16* ks = reinterpret_cast<bf16*>(smem + lay.k);
  bf16* vs = reinterpret_cast<bf16*>(smem + lay.v);
  float* ss = reinterpret_cast<float*>(smem + lay.s);
  bf16* ps = reinterpret_cast<bf16*>(smem + lay.p);
  float* os = reinterpret_cast<float*>(smem + lay.o);
  int64_t* offs = reinterpret_cast<int64_t*>(smem + lay.rows);

  const int64_t nq = dm.w * dm.s, q0 = blockIdx.x * static_cast<int64_t>(kRows);
  const int64_t j = blockIdx.y, kj = j / dm.g;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = lane / 2, half = lane % 2;  // this lane's query row (of the warp's 16)
  const int qvalid = static_cast<int>(min(static_cast<int64_t>(kRows), nq - q0));

  if (threadIdx.x < kRows) offs[threadIdx.x] = ((q0 + threadIdx.x) * dm.lh + j) * qld;
  __syncthreads();
  LoadTile(qs, ldh, qbuf, offs, qvalid, d, dp);
  for (int i = threadIdx.x; i < kRows * ldo; i += blockDim.x) os[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  const int64_t start = k_ranges[2 * range], end = k_ranges[2 * range + 1];
  for (int64_t k0 = start; k0 < end; k0 += kKeys) {
    const int kvalid = static_cast<int>(min(static_cast<int64_t>(kKeys), end - k0));
    __syncthreads();  // the previous tile's k, v, p and offsets are no longer read
    if (threadIdx.x < kvalid) {
      const int64_t x = k0 + threadIdx.x, range_of = x / dm.c, u = x % dm.c;
      offs[threadIdx.x] =
          (((u / dm.s) * dm.r + range_of) * dm.s + u % dm.s) * dm.lkv * 2 * dm.d + kj * 2 * dm.d;
    }
    __syncthreads();
    LoadTile(ks, ldh, kv, offs, kvalid, d, dp);
    LoadTile(vs, ldh, kv + dm.d, offs, kvalid, d, dp);
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
    for (int jj = half * 32; jj < half * 32 + 32; ++jj) {
      const float x = jj < kvalid ? srow[jj] * scale : -INFINITY;
      srow[jj] = x;
      tile_max = fmaxf(tile_max, x);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);  // finite: every tile has a valid key
    const float alpha = __expf(m - m_new);   // 0 while m is -inf
    float sum = 0.0f;
    for (int jj = half * 32; jj < half * 32 + 32; ++jj) {
      const bf16 pb = __float2bfloat16(__expf(srow[jj] - m_new));  // 0 past the range
      prow[jj] = pb;
      sum += __bfloat162float(pb);
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

  const int64_t qi = q0 + warp * 16 + row;
  if (qi < nq) {
    const float* orow = os + (warp * 16 + row) * ldo;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    bf16* dst = obuf + (qi * dm.lh + j) * old;
    for (int c = half; c < d; c += 2) dst[c] = __float2bfloat16(orow[c] * inv);
  }
}

// Row copies between the inputs, the message buffers and out. Row n of `rows` rows of `width`
// elements goes from src + SrcOff(n) to dst + DstOff(n).
enum class Copy { kKvPack, kQPack, kOutUnpack };

struct CopyArgs {
  Copy kind;
  int64_t w, s, t, h, lh, kvh, lkv, d, range, ld, off;  // ld, off: the message's row and offset
};

__device__ inline void RowOffsets(const CopyArgs& a, int64_t n, int64_t& src, int64_t& dst) {
  if (a.kind == Copy::kKvPack) {  // n = (p * T + t) * lkv + j, rows of 2D
    const int64_t j = n % a.lkv, t = n / a.lkv % a.t, p = n / (a.lkv * a.t);
    const int64_t head = (p * a.lkv + j) * a.kvh / (a.w * a.lkv);  // repeat_interleave if KVH < W
    src = (t * a.kvh + head) * 2 * a.d;
    dst = n * 2 * a.d;
    return;
  }
  // n = (p * S + s) * lh + j: head p*lh + j of token s of the range.
  const int64_t j = n % a.lh, s = n / a.lh % a.s, p = n / (a.lh * a.s);
  const int64_t tensor = ((a.range * a.s + s) * a.h + p * a.lh + j) * a.d;
  const int64_t message = n * a.ld + a.off;
  src = a.kind == Copy::kQPack ? tensor : message;
  dst = a.kind == Copy::kQPack ? message : tensor;
}

template <int V>
__global__ void CopyRows(const bf16* __restrict__ src, bf16* __restrict__ dst, CopyArgs a,
                         int64_t rows, int64_t width) {
  const int64_t per_row = width / V, total = rows * per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t so, dof;
    RowOffsets(a, i / per_row, so, dof);
    const int64_t c = (i % per_row) * V;
    if constexpr (V == 8) {
      *reinterpret_cast<uint4*>(dst + dof + c) = *reinterpret_cast<const uint4*>(src + so + c);
    } else {
      dst[dof + c] = src[so + c];
    }
  }
}

int Launch(const bf16* src, bf16* dst, const CopyArgs& a, int64_t rows, int64_t width,
           cudaStream_t stream) {
  const bool vec = a.d % 8 == 0;  // widths, row strides and offsets are multiples of d
  const int64_t total = rows * (vec ? width / 8 : width);
  if (total == 0) return 0;
  const unsigned blocks = static_cast<unsigned>(total / 256 + 1 < 8192 ? total / 256 + 1 : 8192);
  if (vec)
    CopyRows<8><<<blocks, 256, 0, stream>>>(src, dst, a, rows, width);
  else
    CopyRows<1><<<blocks, 256, 0, stream>>>(src, dst, a, rows, width);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const kf_tensor* q = kf_input(ctx, "q");
  if (q == nullptr || q->ndim != 4 || q->shape[3] < 1 || q->shape[3] > kMaxD) return 1;
  const int dp = static_cast<int>((q->shape[3] + 15) / 16 * 16);
  const Smem lay(dp);
  if (lay.total > ctx->gpu.smem_per_block_optin) return 1;
  return cudaFuncSetAttribute(FlashRange, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(lay.total)) == cudaSuccess
             ? 0
             : 1;
}

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor *q = kf_input(ctx, "q"), *kv = kf_input(ctx, "kv");
  const kf_tensor* ranges = kf_input(ctx, "k_ranges");
  kf_tensor* out = kf_output(ctx, "out");
  if (q == nullptr || kv == nullptr || ranges == nullptr || out == nullptr || q->dtype != KF_BF16 ||
      q->ndim != 4 || kv->ndim != 4)
    return 2;
  const int64_t w = ctx->world_size, r = q->shape[0], s = q->shape[1], h = q->shape[2];
  const int64_t d = q->shape[3], kvh = kv->shape[2];
  const int64_t c = static_cast<int64_t>(kf_param(ctx, "C", 0));
  if (d > kMaxD || kvh < 1 || h % w != 0 || h % kvh != 0 || (kvh % w != 0 && w % kvh != 0) ||
      c < 1 || c > w * s)
    return 2;
  Dims dm;
  dm.w = w;
  dm.r = r;
  dm.s = s;
  dm.c = c;
  dm.lh = h / w;
  dm.lkv = kvh >= w ? kvh / w : 1;
  dm.g = h / kvh;
  dm.d = d;
  dm.dp = static_cast<int>((d + 15) / 16 * 16);
  const int64_t t = r * s;
  auto* in_q = static_cast<const bf16*>(q->data);
  auto* in_kv = static_cast<const bf16*>(kv->data);
  auto* k_ranges = static_cast<const int64_t*>(ranges->data);
  bf16* y = static_cast<bf16*>(out->data);
  if (t == 0) return 0;

  // Workspace: kv send and receive, then each message's send and receive buffers. Message m
  // has per (token, head) row q_part (m < R) + out_part (m >= 2) blocks of d.
  char* ws = static_cast<char*>(ctx->workspace.data);
  size_t used = 0;
  auto take = [&](size_t elems) {
    bf16* p = reinterpret_cast<bf16*>(ws + used);
    used += Align256(elems * sizeof(bf16));
    return p;
  };
  const size_t kv_elems = static_cast<size_t>(w * t * dm.lkv * 2 * d);
  bf16* kv_send = take(kv_elems);
  bf16* kv_recv = take(kv_elems);
  const int messages = static_cast<int>(r) + 2;
  constexpr int kMaxMessages = 64 + 2;
  if (messages > kMaxMessages) return 2;
  bf16 *send[kMaxMessages], *recv[kMaxMessages];
  int64_t ld[kMaxMessages];
  for (int m = 0; m < messages; ++m) {
    ld[m] = d * ((m < r ? 1 : 0) + (m >= 2 ? 1 : 0));
    const size_t elems = static_cast<size_t>(w * s * dm.lh * ld[m]);
    send[m] = take(elems);
    recv[m] = take(elems);
  }
  if (used > ctx->workspace.nbytes) return 1;
  auto out_off = [&](int m) { return m < r ? d : int64_t{0}; };  // out follows q in a message
  auto a2a = [&](int m) {
    if (ld[m] == 0) return 0;  // R = 1: message 1 carries nothing
    return kf_all_to_all(ctx, send[m], recv[m], static_cast<size_t>(s * dm.lh * ld[m]), KF_BF16);
  };
  auto pack_q = [&](int i) {
    const CopyArgs a{Copy::kQPack, w, s, t, h, dm.lh, kvh, dm.lkv, d, i, ld[i], 0};
    return Launch(in_q, send[i], a, w * s * dm.lh, d, ctx->stream);
  };

  // 1. kv from sequence slices to kv-head groups.
  const CopyArgs kv_args{Copy::kKvPack, w, s, t, h, dm.lh, kvh, dm.lkv, d, 0, 0, 0};
  if (Launch(in_kv, kv_send, kv_args, w * t * dm.lkv, 2 * d, ctx->stream) != 0) return 1;
  if (kf_all_to_all(ctx, kv_send, kv_recv, kv_elems / w, KF_BF16) != 0) return 1;

  // 2-3. The pipelined messages and one attention per range.
  const Smem lay(dm.dp);
  const dim3 grid(static_cast<unsigned>((w * s + kRows - 1) / kRows), static_cast<unsigned>(dm.lh));
  const float scale = 1.0f / sqrtf(static_cast<float>(d));
  if (pack_q(0) != 0 || a2a(0) != 0) return 1;
  for (int i = 0; i < r; ++i) {
    if (i + 1 < r && pack_q(i + 1) != 0) return 1;
    if (a2a(i + 1) != 0) return 1;  // q(i+1) | out(i-1)
    FlashRange<<<grid, kWarps * 32, lay.total, ctx->stream>>>(
        recv[i], ld[i], send[i + 2] + out_off(i + 2), ld[i + 2], kv_recv, k_ranges, i, dm, scale);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  if (a2a(static_cast<int>(r) + 1) != 0) return 1;
  for (int i = 0; i < r; ++i) {
    const CopyArgs a{Copy::kOutUnpack, w, s, t, h, dm.lh, kvh, dm.lkv, d, i, ld[i + 2],
                     out_off(i + 2)};
    if (Launch(recv[i + 2], y, a, w * s * dm.lh, d, ctx->stream) != 0) return 1;
  }
  return 0;
}
