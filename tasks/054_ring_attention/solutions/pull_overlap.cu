// Causal ring attention without the ring: every rank pulls the k/v blocks of the earlier ranks
// straight from their inputs (peer-to-peer cudaMemcpyAsync on the copy engines, on a side stream)
// while its SMs attend to its own block, then attends to all pulled blocks in one pass.
//
//   side stream:  start barrier | pull k/v of rank r-1 | ... | pull k/v of rank 0
//   main stream:  diagonal block (causal, own k/v)     | wait | blocks 0 .. r-1 in one kernel
//
// Against the baseline's ring (transfer, then attend, then merge, W times, on one stream): the
// transfers run under the diagonal block's compute, ranks pull from all peers at once instead of
// forwarding hop by hop, and the online softmax carries its running state (unnormalised fp32 out,
// row max, row sum) from the first kernel into the second, so there is no per-block (out, lse)
// and no merge pass: out is normalised and rounded to bf16 once. Fully masked blocks (later
// ranks) are never fetched nor visited; inside the diagonal block fully masked tiles are skipped.
//
// Ordering: the start barrier (slot [src] of each pad, epoch + 1 per call) orders the pulls after
// every peer entered this call, so its inputs hold this call's values. No end barrier is needed:
// only peers' inputs are read, main waits for the pulls before it ends, and the harness replaces
// inputs only after every rank's call has finished.
#include <cuda_bf16.h>
#include <mma.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int kMaxWorld = 8;
constexpr int kRows = 64;   // queries per block: 4 warps x 16
constexpr int kKeys = 64;   // keys per tile
constexpr int kWarps = 4;
constexpr int kMaxD = 128;
constexpr int kLdS = kKeys + 4;  // fp32 scores
constexpr int kLdP = kKeys + 8;  // bf16 probabilities

struct Dims {
  int64_t b, sq, h, kvh, d;
  int dp;  // d rounded up to 16
};

// The keys attended to: `chunks` k/v blocks of chunk_len rows each ([B, chunk_len, KVH, D]), key
// g in block g / chunk_len at row g % chunk_len, at global position pos0 + g.
struct KvSrc {
  const bf16* k[kMaxWorld];
  const bf16* v[kMaxWorld];
  int chunks;
  int64_t chunk_len;
  int64_t pos0;
};

// The running softmax state of every query, fp32: o [B, Sq, H, D] (unnormalised), m and l
// [B, H, Sq] (row max of the scaled scores, sum of exp(score - m)).
struct State {
  float* o;
  float* m;
  float* l;
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

// 64 x dp tile of rows row0.. of a [B, len, heads, d] tensor (or of the blocks of `src`), zero-
// padded past the rows and past d.
template <class RowPtr>
__device__ void LoadTile(bf16* dst, int ld, int64_t total_rows, int64_t row0, int d, int dp,
                         RowPtr row_ptr) {
  if (d % 8 == 0) {
    const int vecs = dp / 8;
    for (int i = threadIdx.x; i < kRows * vecs; i += blockDim.x) {
      const int r = i / vecs, c = (i % vecs) * 8;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (row0 + r < total_rows && c < d)
        val = *reinterpret_cast<const uint4*>(row_ptr(row0 + r) + c);
      *reinterpret_cast<uint4*>(dst + r * ld + c) = val;
    }
  } else {
    for (int i = threadIdx.x; i < kRows * dp; i += blockDim.x) {
      const int r = i / dp, c = i % dp;
      dst[r * ld + c] = (row0 + r < total_rows && c < d) ? row_ptr(row0 + r)[c]
                                                          : __float2bfloat16(0.0f);
    }
  }
}

// One block: 64 queries of (batch, head), online softmax over every visible key tile of `src`.
// load: start from `st` (else from nothing); final: write normalised bf16 out (else store `st`).
// causal: key at position src.pos0 + g is visible to query i iff it is <= q_pos0 + i.
__global__ void __launch_bounds__(kWarps * 32)
    Flash(const bf16* __restrict__ q, KvSrc src, Dims dm, float scale, int64_t q_pos0, int causal,
          State st, int load, int final, bf16* __restrict__ out) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int dp = dm.dp, ldh = LdH(dp), ldo = LdO(dp), d = static_cast<int>(dm.d);
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
  const int64_t sk = src.chunks * src.chunk_len;

  LoadTile(qs, ldh, dm.sq, q0, d, dp,
           [&](int64_t r) { return q + ((b * dm.sq + r) * dm.h + h) * dm.d; });
  float m = -INFINITY, l = 0.0f;
  {
    float* orow = os + (warp * 16 + row) * ldo;
    const bool have = load && qi < dm.sq;
    const float* so = st.o + ((b * dm.sq + qi) * dm.h + h) * dm.d;
    for (int c = half * (dp / 2); c < (half + 1) * (dp / 2); ++c)
      orow[c] = have && c < d ? so[c] : 0.0f;
    if (have) {
      m = st.m[(b * dm.h + h) * dm.sq + qi];
      l = st.l[(b * dm.h + h) * dm.sq + qi];
    }
  }
  auto k_row = [&](int64_t g) {
    const int64_t c = g / src.chunk_len, r = g % src.chunk_len;
    return src.k[c] + ((b * src.chunk_len + r) * dm.kvh + kh) * dm.d;
  };
  auto v_row = [&](int64_t g) {
    const int64_t c = g / src.chunk_len, r = g % src.chunk_len;
    return src.v[c] + ((b * src.chunk_len + r) * dm.kvh + kh) * dm.d;
  };

  int64_t last_key = sk - 1;  // keys past the block's last query are masked for all its rows
  if (causal) last_key = min(last_key, q_pos0 + min(q0 + kRows, dm.sq) - 1 - src.pos0);
  for (int64_t k0 = 0; k0 <= last_key; k0 += kKeys) {
    __syncthreads();  // the previous tile's k, v are no longer read; q and out are initialised
    LoadTile(ks, ldh, sk, k0, d, dp, k_row);
    LoadTile(vs, ldh, sk, k0, d, dp, v_row);
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

    float* srow = ss + (warp * 16 + row) * kLdS;
    bf16* prow = ps + (warp * 16 + row) * kLdP;
    float tile_max = -INFINITY;
    for (int j = half * 32; j < half * 32 + 32; ++j) {
      const int64_t key = k0 + j;
      const bool visible = key < sk && (!causal || src.pos0 + key <= q_pos0 + qi);
      const float x = visible ? srow[j] * scale : -INFINITY;
      srow[j] = x;
      tile_max = fmaxf(tile_max, x);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    float alpha = 1.0f, sum = 0.0f;
    if (m_new != -INFINITY) {
      alpha = __expf(m - m_new);
      for (int j = half * 32; j < half * 32 + 32; ++j) {
        const bf16 pb = __float2bfloat16(__expf(srow[j] - m_new));
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

  if (qi < dm.sq) {
    const float* orow = os + (warp * 16 + row) * ldo;
    const int64_t at = ((b * dm.sq + qi) * dm.h + h) * dm.d;
    if (final) {
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      for (int c = half; c < d; c += 2) out[at + c] = __float2bfloat16(orow[c] * inv);
    } else {
      for (int c = half; c < d; c += 2) st.o[at + c] = orow[c];
      if (half == 0) {
        st.m[(b * dm.h + h) * dm.sq + qi] = m;
        st.l[(b * dm.h + h) * dm.sq + qi] = l;
      }
    }
  }
}

struct Pads {
  uint32_t* p[kMaxWorld];
};

// Thread t signals peer t (slot `rank` of its pad) and waits for peer t's signal in slot t of
// this rank's pad.
__global__ void StartBarrier(Pads pads, int rank, int world, uint32_t epoch) {
  const int t = threadIdx.x;
  if (t < world && t != rank) {
    kf_signal(pads.p[t] + rank, epoch);
    kf_wait(pads.p[rank] + t, epoch);
  }
}

struct Ctx {
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr, pulled = nullptr;
  uint32_t epoch = 0;
  size_t smem = 0;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const kf_tensor* q = kf_input(ctx, "q");
  if (q == nullptr || q->ndim != 4 || q->shape[3] < 1 || q->shape[3] > kMaxD) return 1;
  if (ctx->world_size > kMaxWorld || ctx->signal_pad.nbytes < kMaxWorld * sizeof(uint32_t))
    return 1;
  Ctx* c = new Ctx;
  ctx->user = c;
  c->smem = Smem(static_cast<int>((q->shape[3] + 15) / 16 * 16)).total;
  if (c->smem > ctx->gpu.smem_per_block_optin) return 1;
  if (cudaFuncSetAttribute(Flash, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(c->smem)) != cudaSuccess)
    return 1;
  if (cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking) != cudaSuccess) return 1;
  if (cudaEventCreateWithFlags(&c->fork, cudaEventDisableTiming) != cudaSuccess) return 1;
  if (cudaEventCreateWithFlags(&c->pulled, cudaEventDisableTiming) != cudaSuccess) return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  Ctx* c = static_cast<Ctx*>(ctx->user);
  const kf_tensor *q = kf_input(ctx, "q"), *k = kf_input(ctx, "k"), *v = kf_input(ctx, "v");
  kf_tensor* out = kf_output(ctx, "out");
  if (c == nullptr || q == nullptr || k == nullptr || v == nullptr || out == nullptr ||
      q->dtype != KF_BF16)
    return 2;
  Dims dm;
  dm.b = q->shape[0];
  dm.sq = q->shape[1];
  dm.h = q->shape[2];
  dm.kvh = k->shape[2];
  dm.d = q->shape[3];
  dm.dp = static_cast<int>((dm.d + 15) / 16 * 16);
  if (dm.kvh < 1 || dm.h % dm.kvh != 0 || dm.d > kMaxD || k->shape[1] != dm.sq) return 2;
  const int world = ctx->world_size, rank = ctx->rank;

  // Workspace: the pulled k and v of ranks 0 .. rank-1, then the fp32 running state.
  const size_t kv_bytes = Align128(k->nbytes);
  const size_t o_bytes = Align128(static_cast<size_t>(q->numel) * sizeof(float));
  const size_t ml_bytes = Align128(static_cast<size_t>(dm.b * dm.h * dm.sq) * sizeof(float));
  char* ws = static_cast<char*>(ctx->workspace.data);
  if (ctx->workspace.nbytes < 2 * (world - 1) * kv_bytes + o_bytes + 2 * ml_bytes) return 1;
  auto slot_k = [&](int p) { return reinterpret_cast<bf16*>(ws + 2 * p * kv_bytes); };
  auto slot_v = [&](int p) { return reinterpret_cast<bf16*>(ws + (2 * p + 1) * kv_bytes); };
  char* f = ws + 2 * (world - 1) * kv_bytes;
  State st{reinterpret_cast<float*>(f), reinterpret_cast<float*>(f + o_bytes),
           reinterpret_cast<float*>(f + o_bytes + ml_bytes)};

  // Side stream: barrier, then pull the earlier ranks' blocks, nearest first.
  const uint32_t epoch = ++c->epoch;
  Pads pads = {};
  for (int p = 0; p < world; ++p) pads.p[p] = static_cast<uint32_t*>(ctx->signal_pad.peers[p]);
  if (cudaEventRecord(c->fork, ctx->stream) != cudaSuccess) return 1;
  if (cudaStreamWaitEvent(c->side, c->fork, 0) != cudaSuccess) return 1;
  StartBarrier<<<1, 32, 0, c->side>>>(pads, rank, world, epoch);
  if (cudaGetLastError() != cudaSuccess) return 1;
  for (int p = rank - 1; p >= 0; --p) {
    if (cudaMemcpyAsync(slot_k(p), k->peers[p], k->nbytes, cudaMemcpyDeviceToDevice, c->side) !=
            cudaSuccess ||
        cudaMemcpyAsync(slot_v(p), v->peers[p], v->nbytes, cudaMemcpyDeviceToDevice, c->side) !=
            cudaSuccess)
      return 1;
  }
  if (cudaEventRecord(c->pulled, c->side) != cudaSuccess) return 1;

  // Main stream: the own (diagonal) block, then every earlier block in one pass.
  const dim3 grid(static_cast<unsigned>((dm.sq + kRows - 1) / kRows), static_cast<unsigned>(dm.h),
                  static_cast<unsigned>(dm.b));
  const float scale = 1.0f / sqrtf(static_cast<float>(dm.d));
  const int64_t q_pos0 = static_cast<int64_t>(rank) * dm.sq;
  bf16* y = static_cast<bf16*>(out->data);
  KvSrc own = {};
  own.k[0] = static_cast<const bf16*>(k->data);
  own.v[0] = static_cast<const bf16*>(v->data);
  own.chunks = 1;
  own.chunk_len = dm.sq;
  own.pos0 = q_pos0;
  Flash<<<grid, kWarps * 32, c->smem, ctx->stream>>>(static_cast<const bf16*>(q->data), own, dm,
                                                     scale, q_pos0, 1, st, 0, rank == 0, y);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (cudaStreamWaitEvent(ctx->stream, c->pulled, 0) != cudaSuccess) return 1;
  if (rank > 0) {
    KvSrc before = {};
    for (int p = 0; p < rank; ++p) {
      before.k[p] = slot_k(p);
      before.v[p] = slot_v(p);
    }
    before.chunks = rank;
    before.chunk_len = dm.sq;
    before.pos0 = 0;
    Flash<<<grid, kWarps * 32, c->smem, ctx->stream>>>(static_cast<const bf16*>(q->data), before,
                                                       dm, scale, q_pos0, 1, st, 1, 1, y);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  return 0;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  Ctx* c = static_cast<Ctx*>(ctx->user);
  if (c == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (c->side != nullptr && cudaStreamSynchronize(c->side) != cudaSuccess) rc = 1;
  if (c->side != nullptr) cudaStreamDestroy(c->side);
  if (c->fork != nullptr) cudaEventDestroy(c->fork);
  if (c->pulled != nullptr) cudaEventDestroy(c->pulled);
  delete c;
  ctx->user = nullptr;
  return rc;
}
