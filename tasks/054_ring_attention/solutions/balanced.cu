// Causal ring attention with the causal mask's work balanced over the ranks, the layout unchanged.
// With contiguous shards, rank r attends to r + 1/2 blocks of keys (its own block under the mask
// and the r blocks before it): the last rank does W - 1/2 blocks of work while rank 0 does 1/2.
// Here ranks pair up, light rank r with heavy rank M = W-1-r, and the light one attends the heavy
// one's queries to the first keys [0, split) of the sequence, split = (M - r) / 2 blocks, so that
// both do W/2 blocks; the heavy rank does the rest of its keys [split, M*S) and merges the light
// rank's partial softmax state into its own. The inputs and outputs keep their layout: the light
// rank reads the heavy rank's queries (a pulled copy) and writes its partial state into the heavy
// rank's workspace with peer stores.
//
//   side stream (all):  start barrier | pulls: heavy's q and k/v for the help | k/v for own work
//   main, light rank:   diagonal block | wait, help: M's queries x keys [0, split) -> M's
//                       workspace, signal M | wait, own keys [0, r*S), normalise, out
//   main, heavy rank:   diagonal block | wait, own keys [split, M*S) | wait for r's signal,
//                       merge both states, normalise, out
//
// Transfers (peer-to-peer cudaMemcpyAsync on the copy engines) overlap the diagonal block; the
// softmax state (unnormalised fp32 out, row max, row sum) is carried between launches, so out is
// normalised and rounded to bf16 once. Against pull_overlap.cu, the slowest rank does W/2 instead
// of W - 1/2 blocks (1.5x less at W = 2, 1.9x at W = 8) for one extra q transfer and one fp32
// state transfer per pair.
//
// Ordering: the start barrier (pad slots [src], epoch + 1 per call) orders the pulls and the peer
// stores of the help after every peer entered this call (its inputs hold this call's values, its
// workspace is no longer read by its previous call). The help's stores are published by a
// __threadfence_system and a release store of the epoch into pad slot [kHelpSlot] of the heavy
// rank, which waits for it (acquire) before it merges. No end barrier: only peers' inputs are
// read, and a rank's stores into its heavy peer's workspace are read by that peer in this call.
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

// The keys attended to: `count` consecutive keys that start `first` rows into a list of k/v
// blocks of chunk_len rows each ([B, chunk_len, KVH, D]): key g is row (first + g) % chunk_len of
// block (first + g) / chunk_len, at global position pos0 + g.
struct KvSrc {
  const bf16* k[kMaxWorld];
  const bf16* v[kMaxWorld];
  int64_t chunk_len;
  int64_t first;
  int64_t count;
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
  const int64_t sk = src.count;

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
    const int64_t t = src.first + g, c = t / src.chunk_len, r = t % src.chunk_len;
    return src.k[c] + ((b * src.chunk_len + r) * dm.kvh + kh) * dm.d;
  };
  auto v_row = [&](int64_t g) {
    const int64_t t = src.first + g, c = t / src.chunk_len, r = t % src.chunk_len;
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

constexpr int kHelpSlot = kMaxWorld;  // pad slot [kHelpSlot]: the light peer's help is stored

// Thread t signals peer t (slot `rank` of its pad) and waits for peer t's signal in slot t of
// this rank's pad.
__global__ void StartBarrier(Pads pads, int rank, int world, uint32_t epoch) {
  const int t = threadIdx.x;
  if (t < world && t != rank) {
    kf_signal(pads.p[t] + rank, epoch);
    kf_wait(pads.p[rank] + t, epoch);
  }
}

__global__ void Signal(uint32_t* slot, uint32_t epoch) {
  __threadfence_system();
  kf_signal(slot, epoch);
}

__global__ void Wait(const uint32_t* slot, uint32_t epoch) { kf_wait(slot, epoch); }

// out = (own.o * a + help.o * c) / (own.l * a + help.l * c), a = exp(own.m - m), c = exp(help.m
// - m), m the larger row max: the softmax over both key sets.
__global__ void MergeFinal(State own, State help, Dims dm, bf16* __restrict__ out) {
  const int64_t n = dm.b * dm.sq * dm.h * dm.d;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = e / dm.d, b = row / (dm.sq * dm.h), i = row / dm.h % dm.sq, h = row % dm.h;
    const int64_t ml = (b * dm.h + h) * dm.sq + i;
    const float m1 = own.m[ml], m2 = help.m[ml];
    const float m = fmaxf(m1, m2);
    const float a = m1 == -INFINITY ? 0.0f : __expf(m1 - m);
    const float c = m2 == -INFINITY ? 0.0f : __expf(m2 - m);
    const float l = own.l[ml] * a + help.l[ml] * c;
    out[e] = __float2bfloat16(l > 0.0f ? (own.o[e] * a + help.o[e] * c) / l : 0.0f);
  }
}

struct Ctx {
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr, help_ready = nullptr, own_ready = nullptr;
  uint32_t epoch = 0;
  size_t smem = 0;
};

// Workspace offsets, the same on every rank (the light rank stores into its heavy peer's).
struct Layout {
  size_t kv, q, o, ml;
  size_t slots, q_copy, own, help, total;
  Layout(const kf_tensor& q_t, const kf_tensor& k_t, const Dims& dm, int world) {
    kv = Align128(k_t.nbytes);
    q = Align128(q_t.nbytes);
    o = Align128(static_cast<size_t>(q_t.numel) * sizeof(float));
    ml = Align128(static_cast<size_t>(dm.b * dm.h * dm.sq) * sizeof(float));
    slots = 0;                               // k and v of rank p at 2p, 2p + 1
    q_copy = slots + 2 * world * kv;         // the heavy peer's queries
    own = q_copy + q;                        // this rank's running state (o, m, l)
    help = own + o + 2 * ml;                 // the light peer's help (o, m, l)
    total = help + o + 2 * ml;
  }
  State StateAt(char* base, size_t at) const {
    return State{reinterpret_cast<float*>(base + at), reinterpret_cast<float*>(base + at + o),
                 reinterpret_cast<float*>(base + at + o + ml)};
  }
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const kf_tensor* q = kf_input(ctx, "q");
  if (q == nullptr || q->ndim != 4 || q->shape[3] < 1 || q->shape[3] > kMaxD) return 1;
  if (ctx->world_size > kMaxWorld || ctx->signal_pad.nbytes < (kHelpSlot + 1) * sizeof(uint32_t))
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
  if (cudaEventCreateWithFlags(&c->help_ready, cudaEventDisableTiming) != cudaSuccess) return 1;
  if (cudaEventCreateWithFlags(&c->own_ready, cudaEventDisableTiming) != cudaSuccess) return 1;
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
  const int world = ctx->world_size, rank = ctx->rank, mirror = world - 1 - rank;
  const int64_t s = dm.sq;

  // The pair: the light rank attends the heavy one's queries to keys [0, split), split = (heavy -
  // light) / 2 blocks. (With W odd the middle rank has no pair.)
  const bool light = rank < mirror, heavy = rank > mirror;
  const int lo = light ? rank : mirror;
  const int64_t split = (light || heavy) ? static_cast<int64_t>(world - 1 - 2 * lo) * s / 2 : 0;
  const bool helps = light && split > 0, helped = heavy && split > 0;
  const int help_blocks = static_cast<int>((split + s - 1) / s);  // blocks 0 .. help_blocks-1
  // This rank's own keys before its diagonal block: [first_key, rank * S).
  const int64_t first_key = helped ? split : 0;
  const int64_t own_keys = static_cast<int64_t>(rank) * s - first_key;
  const int first_block = static_cast<int>(first_key / s);

  const Layout lay(*q, *k, dm, world);
  char* ws = static_cast<char*>(ctx->workspace.data);
  if (ctx->workspace.nbytes < lay.total) return 1;
  auto block_k = [&](int p) -> const bf16* {
    return p == rank ? static_cast<const bf16*>(k->data)
                     : reinterpret_cast<const bf16*>(ws + lay.slots + 2 * p * lay.kv);
  };
  auto block_v = [&](int p) -> const bf16* {
    return p == rank ? static_cast<const bf16*>(v->data)
                     : reinterpret_cast<const bf16*>(ws + lay.slots + (2 * p + 1) * lay.kv);
  };
  auto pull = [&](int p) {
    char* dst = ws + lay.slots + 2 * p * lay.kv;
    return cudaMemcpyAsync(dst, k->peers[p], k->nbytes, cudaMemcpyDeviceToDevice, c->side) ==
                   cudaSuccess &&
           cudaMemcpyAsync(dst + lay.kv, v->peers[p], v->nbytes, cudaMemcpyDeviceToDevice,
                           c->side) == cudaSuccess;
  };
  const State own_state = lay.StateAt(ws, lay.own);

  // Side stream: barrier; the help's inputs; then the blocks of this rank's own keys.
  const uint32_t epoch = ++c->epoch;
  Pads pads = {};
  for (int p = 0; p < world; ++p) pads.p[p] = static_cast<uint32_t*>(ctx->signal_pad.peers[p]);
  if (cudaEventRecord(c->fork, ctx->stream) != cudaSuccess) return 1;
  if (cudaStreamWaitEvent(c->side, c->fork, 0) != cudaSuccess) return 1;
  StartBarrier<<<1, 32, 0, c->side>>>(pads, rank, world, epoch);
  if (cudaGetLastError() != cudaSuccess) return 1;
  bool pulled[kMaxWorld] = {};
  if (helps) {
    if (cudaMemcpyAsync(ws + lay.q_copy, q->peers[mirror], q->nbytes, cudaMemcpyDeviceToDevice,
                        c->side) != cudaSuccess)
      return 1;
    for (int p = 0; p < help_blocks; ++p) {
      if (p == rank) continue;
      if (!pull(p)) return 1;
      pulled[p] = true;
    }
  }
  if (cudaEventRecord(c->help_ready, c->side) != cudaSuccess) return 1;
  for (int p = first_block; p < rank; ++p) {
    if (pulled[p]) continue;
    if (!pull(p)) return 1;
  }
  if (cudaEventRecord(c->own_ready, c->side) != cudaSuccess) return 1;

  // Main stream.
  const dim3 grid(static_cast<unsigned>((s + kRows - 1) / kRows), static_cast<unsigned>(dm.h),
                  static_cast<unsigned>(dm.b));
  const float scale = 1.0f / sqrtf(static_cast<float>(dm.d));
  const int64_t q_pos0 = static_cast<int64_t>(rank) * s;
  bf16* y = static_cast<bf16*>(out->data);
  const bf16* qd = static_cast<const bf16*>(q->data);

  // 1. The diagonal block (its last launch normalises when nothing else is to come).
  KvSrc diag = {};
  diag.k[0] = block_k(rank);
  diag.v[0] = block_v(rank);
  diag.chunk_len = s;
  diag.first = 0;
  diag.count = s;
  diag.pos0 = q_pos0;
  const bool diag_final = own_keys == 0 && !helped;
  Flash<<<grid, kWarps * 32, c->smem, ctx->stream>>>(qd, diag, dm, scale, q_pos0, 1, own_state, 0,
                                                     diag_final, y);
  if (cudaGetLastError() != cudaSuccess) return 1;

  // 2. Light rank: the heavy peer's queries against keys [0, split), into the peer's workspace.
  if (cudaStreamWaitEvent(ctx->stream, c->help_ready, 0) != cudaSuccess) return 1;
  if (helps) {
    KvSrc front = {};
    for (int p = 0; p < help_blocks; ++p) {
      front.k[p] = block_k(p);
      front.v[p] = block_v(p);
    }
    front.chunk_len = s;
    front.first = 0;
    front.count = split;
    front.pos0 = 0;
    const State peer_help = lay.StateAt(static_cast<char*>(ctx->workspace.peers[mirror]), lay.help);
    Flash<<<grid, kWarps * 32, c->smem, ctx->stream>>>(
        reinterpret_cast<const bf16*>(ws + lay.q_copy), front, dm, scale,
        static_cast<int64_t>(mirror) * s, 1, peer_help, 0, 0, y);
    Signal<<<1, 1, 0, ctx->stream>>>(pads.p[mirror] + kHelpSlot, epoch);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }

  // 3. This rank's own keys before its diagonal block.
  if (cudaStreamWaitEvent(ctx->stream, c->own_ready, 0) != cudaSuccess) return 1;
  if (own_keys > 0) {
    KvSrc before = {};
    for (int p = first_block; p < rank; ++p) {
      before.k[p - first_block] = block_k(p);
      before.v[p - first_block] = block_v(p);
    }
    before.chunk_len = s;
    before.first = first_key - static_cast<int64_t>(first_block) * s;
    before.count = own_keys;
    before.pos0 = first_key;
    Flash<<<grid, kWarps * 32, c->smem, ctx->stream>>>(qd, before, dm, scale, q_pos0, 1,
                                                       own_state, 1, helped ? 0 : 1, y);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }

  // 4. Heavy rank: wait for the light peer's help, merge, normalise.
  if (helped) {
    Wait<<<1, 1, 0, ctx->stream>>>(pads.p[rank] + kHelpSlot, epoch);
    const int64_t n = q->numel;
    const unsigned blocks = static_cast<unsigned>(n / 256 + 1 < 8192 ? n / 256 + 1 : 8192);
    MergeFinal<<<blocks, 256, 0, ctx->stream>>>(own_state, lay.StateAt(ws, lay.help), dm, y);
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
  if (c->help_ready != nullptr) cudaEventDestroy(c->help_ready);
  if (c->own_ready != nullptr) cudaEventDestroy(c->own_ready);
  delete c;
  ctx->user = nullptr;
  return rc;
}
