// Ring attention under TP x CP with the causal mask's work balanced over the CP group.
//
// With contiguous shards CP position c attends to c + 1/2 blocks of keys, so the last position
// takes CP - 1/2 block-times while the group averages CP / 2. Positions pair up, light
// c < CP / 2 with heavy CP - 1 - c, and the light one takes U = (heavy - light) * HL / 2 of the
// heavy one's (block, head) units, block-major from block 0: for heads j < nh(p) of block p it
// attends the heavy rank's queries (q copied from its workspace) to block p's keys and keeps the
// partial softmax state (unnormalised out, row max, row sum) in its own workspace; the heavy rank
// attends the rest and merges that state into its own before normalising. Both then do CP / 2
// block-times. The layout does not change: every rank still writes its own rows.
//
//   light main: QKV | flag k/v | diagonal | heavy's units (partial state) | flag partial |
//               blocks c-1 .. 0 | per row chunk: ctx, Wo GEMM, flag partial i to the TP partner
//   heavy main: QKV | flag k/v | diagonal | blocks c-1 .. p_last (heads nh(p) ..) | wait for the
//               light partial | per row chunk: merge + ctx, Wo GEMM, flag it
//   pull:       per needed CP peer: wait for its k/v flag, copy its k/v (and the heavy's q)
//   tp side:    per row chunk: wait for the partner's flag, out = own + partner's partial
// k/v come from their owners' workspaces on the copy engines (no ring), and the TP sum of a chunk
// runs under the next chunk's projection.
//
// Ordering: whatever a peer reads (q, k, v, partial state, TP partials) is written once per call
// before the kf_signal that publishes it (epoch + 1 per call) and read only after kf_wait sees it;
// the harness starts a call only when every rank's previous call has finished.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int kRows = 64;  // queries per block: 4 warps x 16
constexpr int kKeys = 64;  // keys per tile
constexpr int kThreads = 128;
constexpr int kMaxD = 128;
constexpr int kLdS = kKeys + 4;  // fp32 scores
constexpr int kLdP = kKeys + 8;  // bf16 probabilities
constexpr size_t kCublasWorkspace = 32u << 20;
constexpr int kMaxCp = 8;
constexpr int kChunks = 4;  // row chunks of the last block
// Pad slots: [0, kMaxCp) k/v ready (by CP position), then one per TP chunk, then the light
// partner's partial state.
constexpr int kTpSlot = kMaxCp;
constexpr int kPartialSlot = kTpSlot + kChunks;

constexpr int kCausal = 1;  // the queries' own block: key j visible to query i iff j <= i
constexpr int kInit = 2;    // the first block of a state: start it instead of reading it

struct Dims {
  int64_t b, s, h, d;  // h: heads of this TP rank
  int dp;              // d rounded up to 16
};

__host__ __device__ inline size_t Align256(size_t x) { return (x + 255) / 256 * 256; }

// bf16 q, k, v tiles (row stride dp + 8), fp32 scores, bf16 probabilities, fp32 out (dp + 4).
struct Smem {
  size_t k, v, s, p, o, total;
  __host__ __device__ explicit Smem(int dp) {
    const size_t tile = Align256(static_cast<size_t>(kRows) * (dp + 8) * sizeof(bf16));
    k = tile;
    v = k + tile;
    s = v + tile;
    p = s + Align256(static_cast<size_t>(kRows) * kLdS * sizeof(float));
    o = p + Align256(static_cast<size_t>(kRows) * kLdP * sizeof(bf16));
    total = o + static_cast<size_t>(kRows) * (dp + 4) * sizeof(float);
  }
};

// Rows row0 .. row0+63 of head hh of batch b of a [B, S, H, D] tensor, zero past S and past D.
// D is a multiple of 8, so rows are 16-byte vectors.
__device__ void LoadTile(bf16* dst, const bf16* src, const Dims& dm, int64_t b, int64_t hh,
                         int64_t row0) {
  const int vecs = dm.dp / 8, ld = dm.dp + 8;
  for (int i = threadIdx.x; i < kRows * vecs; i += blockDim.x) {
    const int r = i / vecs, c = (i % vecs) * 8;
    const int64_t row = row0 + r;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (row < dm.s && c < dm.d)
      val = *reinterpret_cast<const uint4*>(src + ((b * dm.s + row) * dm.h + hh) * dm.d + c);
    *reinterpret_cast<uint4*>(dst + r * ld + c) = val;
  }
}

// 64 queries of (batch, head head0 + blockIdx.y) against one k/v block, query tiles tile0 ..
// tile0 + gridDim.x - 1. State: o [B, S, H, D] (unnormalised), m, l [B, H, S]; read unless
// kInit, always written.
__global__ void __launch_bounds__(kThreads)
    FlashStep(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
              float* __restrict__ o, float* __restrict__ m, float* __restrict__ l, Dims dm,
              float scale, int flags, int tile0, int head0) {
  extern __shared__ __align__(256) unsigned char smem[];
  const Smem lay(dm.dp);
  const int dp = dm.dp, ldh = dp + 8, ldo = dp + 4;
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = reinterpret_cast<bf16*>(smem + lay.k);
  bf16* vs = reinterpret_cast<bf16*>(smem + lay.v);
  float* ss = reinterpret_cast<float*>(smem + lay.s);
  bf16* ps = reinterpret_cast<bf16*>(smem + lay.p);
  float* os = reinterpret_cast<float*>(smem + lay.o);

  const int64_t q0 = (tile0 + gridDim.x - 1 - blockIdx.x) * kRows;  // longest (causal) first
  const int64_t hh = head0 + blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wrow = warp * 16 + lane / 2, half = lane % 2;  // this lane pair's query row
  const int64_t qi = q0 + wrow;
  const bool diag = (flags & kCausal) != 0, init = (flags & kInit) != 0, valid = qi < dm.s;
  const int64_t srow = (b * dm.h + hh) * dm.s + qi;  // index into m, l
  const int64_t orow0 = ((b * dm.s + qi) * dm.h + hh) * dm.d;
  float* orow = os + wrow * ldo;
  const int c0 = half * (dp / 2), c1 = c0 + dp / 2;  // this lane's half of the row

  LoadTile(qs, q, dm, b, hh, q0);
  float mi = -INFINITY, li = 0.0f;
  for (int c = c0; c < c1; ++c) orow[c] = (!init && valid && c < dm.d) ? o[orow0 + c] : 0.0f;
  if (!init && valid) {
    mi = m[srow];
    li = l[srow];
  }

  const int64_t last_key = diag ? min(dm.s - 1, q0 + kRows - 1) : dm.s - 1;
  for (int64_t k0 = 0; k0 <= last_key; k0 += kKeys) {
    __syncthreads();  // the previous tile's k, v and p are no longer read
    LoadTile(ks, k, dm, b, hh, k0);
    LoadTile(vs, v, dm, b, hh, k0);
    __syncthreads();
    for (int n = 0; n < kKeys / 16; ++n) {  // the warp's 16 queries x 64 keys
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

    // Online softmax, two lanes per row (32 keys each); probabilities rounded to bf16.
    float* sr = ss + wrow * kLdS;
    bf16* pr = ps + wrow * kLdP;
    float tmax = -INFINITY;
    for (int j = half * 32; j < half * 32 + 32; ++j) {
      const int64_t key = k0 + j;
      const float x = (key < dm.s && (!diag || key <= qi)) ? sr[j] * scale : -INFINITY;
      sr[j] = x;
      tmax = fmaxf(tmax, x);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
    const float mnew = fmaxf(mi, tmax);
    const float alpha = mnew == -INFINITY ? 1.0f : __expf(mi - mnew);
    float sum = 0.0f;
    for (int j = half * 32; j < half * 32 + 32; ++j) {
      const bf16 p = __float2bfloat16(mnew == -INFINITY ? 0.0f : __expf(sr[j] - mnew));
      pr[j] = p;
      sum += __bfloat162float(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    li = li * alpha + sum;
    mi = mnew;
    for (int c = c0; c < c1; ++c) orow[c] *= alpha;
    __syncwarp();

    for (int n = 0; n < dp; n += 16) {  // o += p v for the warp's 16 rows
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
  if (!valid) return;
  for (int c = half; c < dm.d; c += 2) o[orow0 + c] = orow[c];
  if (half == 0) {
    m[srow] = mi;
    l[srow] = li;
  }
}

// Row-major c[batch][m, n] = a[batch][m, k] @ b[n, k]^T (b: PyTorch's [out, in] weight), bf16 in
// and out, fp32 accumulation: column-major c^T = b a^T. Strides in elements; b_stride 0 shares b.
cublasStatus_t GemmNT(cublasHandle_t handle, int64_t m, int64_t n, int64_t k, const bf16* a,
                      int64_t a_stride, const bf16* b, int64_t b_stride, bf16* c, int64_t c_stride,
                      int batch) {
  const float one = 1.0f, zero = 0.0f;
  return cublasGemmStridedBatchedEx(
      handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
      static_cast<int>(k), &one, b, CUDA_R_16BF, static_cast<int>(k), b_stride, a, CUDA_R_16BF,
      static_cast<int>(k), a_stride, &zero, c, CUDA_R_16BF, static_cast<int>(n), c_stride, batch,
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

// Thread i < n stores `epoch` into slot[i] (pads of the peers told), after this stream's earlier
// kernels: their stores are visible to whoever observes the flag.
struct Slots {
  uint32_t* p[kMaxCp];
};
__global__ void Signal(Slots slots, int n, uint32_t epoch) {
  __threadfence_system();
  if (static_cast<int>(threadIdx.x) < n) kf_signal(slots.p[threadIdx.x], epoch);
}

// Waits until slot[i] >= epoch for every i < n.
__global__ void Wait(Slots slots, int n, uint32_t epoch) {
  if (static_cast<int>(threadIdx.x) < n) kf_wait(slots.p[threadIdx.x], epoch);
}

// out = mine + theirs on rows [r0, r1) of each batch's [S, HID] (after a Wait for the partner's
// flag on the same stream: one spinning thread, not a grid of them holding SMs from the kernels
// that the partner's flag waits for when ranks share a GPU).
__global__ void SumChunk(const bf16* __restrict__ mine, const bf16* __restrict__ theirs,
                         bf16* __restrict__ out, int64_t b, int64_t s, int64_t hid, int64_t r0,
                         int64_t r1) {
  const int64_t per = (r1 - r0) * hid, n = b * per;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i / per * s * hid + r0 * hid + i % per;
    out[e] = __float2bfloat16(__bfloat162float(mine[e]) + __bfloat162float(theirs[e]));
  }
}

// ctx = o / l on rows [r0, r1) of every batch, all heads. Heads j < merge_heads first merge the
// light partner's partial state (po, pm, pl: the same layout, over other keys of the same rows).
__global__ void Finish(const float* __restrict__ o, const float* __restrict__ m,
                       const float* __restrict__ l, const float* __restrict__ po,
                       const float* __restrict__ pm, const float* __restrict__ pl, int merge_heads,
                       bf16* __restrict__ ctx, Dims dm, int64_t r0, int64_t r1) {
  const int64_t hd = dm.h * dm.d, per = (r1 - r0) * hd, n = dm.b * per;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / per, rem = i % per, row = r0 + rem / hd, j = rem / dm.d % dm.h;
    const int64_t e = (b * dm.s + r0) * hd + rem, srow = (b * dm.h + j) * dm.s + row;
    float val = o[e], sum = l[srow];
    if (j < merge_heads) {
      const float ma = m[srow], mb = pm[srow], mx = fmaxf(ma, mb);
      const float wa = ma == -INFINITY ? 0.0f : __expf(ma - mx);
      const float wb = mb == -INFINITY ? 0.0f : __expf(mb - mx);
      val = val * wa + po[e] * wb;
      sum = sum * wa + pl[srow] * wb;
    }
    ctx[e] = __float2bfloat16(sum > 0.0f ? val / sum : 0.0f);
  }
}

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
  cudaStream_t cp_side = nullptr, tp_side = nullptr;
  cudaEvent_t fork = nullptr, done = nullptr;
  cudaEvent_t pulled[kMaxCp] = {};
  cudaEvent_t q_pulled = nullptr;
  cudaEvent_t projected[kChunks] = {};
  uint32_t epoch = 0;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  State* st = new State;
  ctx->user = st;
  const kf_tensor* w = kf_input(ctx, "wqkv");
  if (w == nullptr || w->ndim != 3 || w->shape[1] < 8 || w->shape[1] > kMaxD ||
      w->shape[1] % 8 != 0 || ctx->world_size > 2 * kMaxCp ||
      ctx->signal_pad.nbytes < (kPartialSlot + 1) * sizeof(uint32_t))
    return 1;
  const Smem lay(static_cast<int>((w->shape[1] + 15) / 16 * 16));
  if (lay.total > ctx->gpu.smem_per_block_optin) return 1;
  if (cudaFuncSetAttribute(FlashStep, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(lay.total)) != cudaSuccess)
    return 1;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    return 1;
  if (cudaStreamCreateWithFlags(&st->cp_side, cudaStreamNonBlocking) != cudaSuccess ||
      cudaStreamCreateWithFlags(&st->tp_side, cudaStreamNonBlocking) != cudaSuccess)
    return 1;
  cudaEvent_t* events[] = {&st->fork, &st->done, &st->q_pulled};
  for (cudaEvent_t* e : events)
    if (cudaEventCreateWithFlags(e, cudaEventDisableTiming) != cudaSuccess) return 1;
  for (cudaEvent_t& e : st->pulled)
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return 1;
  for (cudaEvent_t& e : st->projected)
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor *h = kf_input(ctx, "h"), *wqkv = kf_input(ctx, "wqkv"), *wo = kf_input(ctx, "wo");
  kf_tensor* out = kf_output(ctx, "out");
  const int tpi = kf_group_index(ctx, "tp"), cpi = kf_group_index(ctx, "cp");
  if (h == nullptr || wqkv == nullptr || wo == nullptr || out == nullptr || tpi < 0 || cpi < 0 ||
      h->dtype != KF_BF16 || h->ndim != 3 || wqkv->ndim != 3)
    return 2;
  Dims dm;
  dm.b = h->shape[0];
  dm.s = h->shape[1];
  dm.h = wqkv->shape[0] / 3;
  dm.d = wqkv->shape[1];
  dm.dp = static_cast<int>((dm.d + 15) / 16 * 16);
  const int64_t hid = h->shape[2], rows = dm.b * dm.s, width = dm.h * dm.d;
  const kf_group& cp = ctx->groups[cpi];
  const kf_group& tp = ctx->groups[tpi];
  const int c = cp.rank, n_cp = cp.size;
  if (n_cp > kMaxCp || tp.size > 2) return 2;

  // The pair: light lo < n_cp / 2 and heavy hi = n_cp - 1 - lo (an odd CP has an unpaired middle
  // rank, which balances itself). The light one takes units = (hi - lo) * H / 2 (block, head)
  // units of the heavy one's, block-major: heads [0, nh(p)) of blocks p = 0 .. nb - 1.
  const int mate = n_cp - 1 - c;
  const bool light = (c < mate), heavy = (c > mate);
  const int lo = light ? c : mate, hi = light ? mate : c;
  const int64_t units = (lo < hi) ? static_cast<int64_t>(hi - lo) * dm.h / 2 : 0;
  const int nb = static_cast<int>((units + dm.h - 1) / dm.h);
  auto nh = [&](int p) {  // heads of block p that the light rank attends for the heavy one
    const int64_t left = units - static_cast<int64_t>(p) * dm.h;
    return static_cast<int>(left <= 0 ? 0 : (left < dm.h ? left : dm.h));
  };
  const int merge_heads = nh(0);
  // The heavy rank's own blocks: p_last .. c-1 (blocks below p_last are the light one's).
  const int p_last = heavy ? static_cast<int>(units / dm.h) : 0;

  // Workspace (the same offsets on every rank): q, k, v | k/v slots by CP position | the heavy
  // mate's q | ctx | own state (o, m, l) | partial state for the mate | TP partial.
  const size_t kv_elems = static_cast<size_t>(rows * width);
  const size_t act = Align256(kv_elems * sizeof(bf16));
  const size_t o_bytes = Align256(kv_elems * sizeof(float));
  const size_t ml_bytes = Align256(static_cast<size_t>(rows * dm.h) * sizeof(float));
  const size_t part_bytes = Align256(static_cast<size_t>(rows * hid) * sizeof(bf16));
  const size_t slots_at = 3 * act, mate_q_at = slots_at + 2 * n_cp * act;
  const size_t ctx_at = mate_q_at + act, o_at = ctx_at + act;
  const size_t partial_at = o_at + o_bytes + 2 * ml_bytes;
  const size_t part_at = partial_at + o_bytes + 2 * ml_bytes;
  if (ctx->workspace.nbytes < part_at + part_bytes) return 1;
  char* ws = static_cast<char*>(ctx->workspace.data);
  bf16* q = reinterpret_cast<bf16*>(ws);
  const bf16* own_k = reinterpret_cast<const bf16*>(ws + act);
  const bf16* own_v = reinterpret_cast<const bf16*>(ws + 2 * act);
  auto slot = [&](int p, int which) {  // k (0) or v (1) of CP position p
    return reinterpret_cast<bf16*>(ws + slots_at + (2 * p + which) * act);
  };
  auto key = [&](int p) { return p == c ? own_k : slot(p, 0); };
  auto val = [&](int p) { return p == c ? own_v : slot(p, 1); };
  bf16* mate_q = reinterpret_cast<bf16*>(ws + mate_q_at);
  bf16* attn = reinterpret_cast<bf16*>(ws + ctx_at);
  auto ml = [&](char* base, int which) {
    return reinterpret_cast<float*>(base + o_bytes + which * ml_bytes);
  };
  float* o = reinterpret_cast<float*>(ws + o_at);
  float* partial_o = reinterpret_cast<float*>(ws + partial_at);
  bf16* part = reinterpret_cast<bf16*>(ws + part_at);
  const uint32_t epoch = ++st->epoch;
  auto pad_of = [&](int world_rank) {
    return static_cast<uint32_t*>(ctx->signal_pad.peers[world_rank]);
  };

  if (cudaEventRecord(st->fork, ctx->stream) != cudaSuccess ||
      cudaStreamWaitEvent(st->cp_side, st->fork, 0) != cudaSuccess ||
      cudaStreamWaitEvent(st->tp_side, st->fork, 0) != cudaSuccess)
    return 1;

  // QKV projection, then tell every CP peer that this rank's q, k, v are in place.
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  if (GemmNT(st->handle, rows, width, hid, static_cast<const bf16*>(h->data), 0,
             static_cast<const bf16*>(wqkv->data), width * hid, q, static_cast<int64_t>(kv_elems),
             3) != CUBLAS_STATUS_SUCCESS)
    return 1;
  if (n_cp > 1) {
    Slots all{};
    int n = 0;
    for (int p = 0; p < n_cp; ++p)
      if (p != c) all.p[n++] = pad_of(cp.ranks[p]) + c;
    Signal<<<1, 32, 0, ctx->stream>>>(all, n, epoch);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }

  // cp side: copy what this rank needs from its CP peers, in the order main uses it.
  auto pull = [&](int p, bool with_q, bool with_kv) {
    Slots from{};
    from.p[0] = pad_of(ctx->rank) + p;
    Wait<<<1, 32, 0, st->cp_side>>>(from, 1, epoch);
    if (cudaGetLastError() != cudaSuccess) return false;
    const char* peer = static_cast<const char*>(ctx->workspace.peers[cp.ranks[p]]);
    const size_t bytes = kv_elems * sizeof(bf16);
    if (with_q && (cudaMemcpyAsync(mate_q, peer, bytes, cudaMemcpyDeviceToDevice, st->cp_side) !=
                       cudaSuccess ||
                   cudaEventRecord(st->q_pulled, st->cp_side) != cudaSuccess))
      return false;
    if (!with_kv) return true;
    return cudaMemcpyAsync(slot(p, 0), peer + act, bytes, cudaMemcpyDeviceToDevice, st->cp_side) ==
               cudaSuccess &&
           cudaMemcpyAsync(slot(p, 1), peer + 2 * act, bytes, cudaMemcpyDeviceToDevice,
                           st->cp_side) == cudaSuccess &&
           cudaEventRecord(st->pulled[p], st->cp_side) == cudaSuccess;
  };
  if (light) {
    if (units > 0 && !pull(hi, true, false)) return 1;  // the mate's q
    for (int p = 0; p < nb; ++p)
      if (p != c && !pull(p, false, true)) return 1;
    for (int p = c - 1; p >= nb; --p)
      if (!pull(p, false, true)) return 1;
  } else {
    for (int p = c - 1; p >= p_last; --p)
      if (!pull(p, false, true)) return 1;
  }

  // Main: the diagonal block, the mate's units (light), the own blocks (heads from nh(p) on,
  // heavy).
  const float scale = 1.0f / sqrtf(static_cast<float>(dm.d));
  const Smem lay(dm.dp);
  const int tiles = static_cast<int>((dm.s + kRows - 1) / kRows);
  auto attend = [&](const bf16* qq, int p, float* so, char* state_base, int flags, int head0,
                    int heads) {
    if (heads <= 0) return true;
    if (p != c && cudaStreamWaitEvent(ctx->stream, st->pulled[p], 0) != cudaSuccess) return false;
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(heads),
                    static_cast<unsigned>(dm.b));
    FlashStep<<<grid, kThreads, lay.total, ctx->stream>>>(
        qq, key(p), val(p), so, ml(state_base, 0), ml(state_base, 1), dm, scale, flags, 0, head0);
    return cudaGetLastError() == cudaSuccess;
  };
  char* own_base = ws + o_at;
  char* partial_base = ws + partial_at;
  if (!attend(q, c, o, own_base, kCausal | kInit, 0, static_cast<int>(dm.h))) return 1;
  if (light && units > 0) {  // the heavy mate's units, then tell it
    if (cudaStreamWaitEvent(ctx->stream, st->q_pulled, 0) != cudaSuccess) return 1;
    for (int p = 0; p < nb; ++p)
      if (!attend(mate_q, p, partial_o, partial_base, p == 0 ? kInit : 0, 0, nh(p))) return 1;
    Slots to{};
    to.p[0] = pad_of(cp.ranks[hi]) + kPartialSlot;
    Signal<<<1, 32, 0, ctx->stream>>>(to, 1, epoch);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  for (int p = c - 1; p >= p_last; --p) {
    const int skip = heavy ? nh(p) : 0;
    if (!attend(q, p, o, own_base, 0, skip, static_cast<int>(dm.h) - skip)) return 1;
  }
  const float *po = nullptr, *pm = nullptr, *pl = nullptr;
  if (heavy && units > 0) {  // the light mate's partial state, read in place
    Slots mine{};
    mine.p[0] = pad_of(ctx->rank) + kPartialSlot;
    Wait<<<1, 32, 0, ctx->stream>>>(mine, 1, epoch);
    if (cudaGetLastError() != cudaSuccess) return 1;
    char* peer = static_cast<char*>(ctx->workspace.peers[cp.ranks[lo]]) + partial_at;
    po = reinterpret_cast<const float*>(peer);
    pm = ml(peer, 0);
    pl = ml(peer, 1);
  }
  const int merge = po == nullptr ? 0 : merge_heads;

  // Per row chunk: ctx, its output projection, and the TP sum on the tp side.
  const bf16* wo_data = static_cast<const bf16*>(wo->data);
  bf16* y = static_cast<bf16*>(out->data);
  const bool alone = tp.size == 1;  // W = 2: no TP sum, project straight into out
  const int partner = alone ? ctx->rank : tp.ranks[1 - tp.rank];
  const bf16* their_part = reinterpret_cast<const bf16*>(
      static_cast<const char*>(ctx->workspace.peers[partner]) + part_at);
  const int chunks = alone ? 1 : (tiles < kChunks ? tiles : kChunks);
  const int per = (tiles + chunks - 1) / chunks;
  for (int i = 0; i * per < tiles; ++i) {
    const int64_t r0 = static_cast<int64_t>(i) * per * kRows;
    const int64_t r1 = r0 + static_cast<int64_t>(per) * kRows < dm.s ? r0 + per * kRows : dm.s;
    const int64_t n = dm.b * (r1 - r0) * width;
    const unsigned fb = static_cast<unsigned>(n / 1024 + 1 < 2048 ? n / 1024 + 1 : 2048);
    Finish<<<fb, 256, 0, ctx->stream>>>(o, ml(own_base, 0), ml(own_base, 1), po, pm, pl, merge,
                                        attn, dm, r0, r1);
    if (cudaGetLastError() != cudaSuccess) return 1;
    if (GemmNT(st->handle, r1 - r0, hid, width, attn + r0 * width, dm.s * width, wo_data, 0,
               (alone ? y : part) + r0 * hid, dm.s * hid,
               static_cast<int>(dm.b)) != CUBLAS_STATUS_SUCCESS)
      return 1;
    if (alone) continue;
    Slots to{};
    to.p[0] = pad_of(partner) + kTpSlot + i;
    Signal<<<1, 32, 0, ctx->stream>>>(to, 1, epoch);
    if (cudaGetLastError() != cudaSuccess) return 1;
    if (cudaEventRecord(st->projected[i], ctx->stream) != cudaSuccess ||
        cudaStreamWaitEvent(st->tp_side, st->projected[i], 0) != cudaSuccess)
      return 1;
    Slots mine{};
    mine.p[0] = pad_of(ctx->rank) + kTpSlot + i;
    Wait<<<1, 32, 0, st->tp_side>>>(mine, 1, epoch);
    const int64_t ny = dm.b * (r1 - r0) * hid;
    const unsigned sb = static_cast<unsigned>(ny / 1024 + 1 < 1024 ? ny / 1024 + 1 : 1024);
    SumChunk<<<sb, 256, 0, st->tp_side>>>(part, their_part, y, dm.b, dm.s, hid, r0, r1);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  // Join both side streams (the cp side's last copy has been waited for unless nothing was
  // pulled; record it anyway).
  if (cudaEventRecord(st->done, st->tp_side) != cudaSuccess ||
      cudaStreamWaitEvent(ctx->stream, st->done, 0) != cudaSuccess ||
      cudaEventRecord(st->done, st->cp_side) != cudaSuccess ||
      cudaStreamWaitEvent(ctx->stream, st->done, 0) != cudaSuccess)
    return 1;
  return 0;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  for (cudaStream_t s : {st->cp_side, st->tp_side})
    if (s != nullptr &&
        (cudaStreamSynchronize(s) != cudaSuccess || cudaStreamDestroy(s) != cudaSuccess))
      rc = 1;
  for (cudaEvent_t e : {st->fork, st->done, st->q_pulled})
    if (e != nullptr) cudaEventDestroy(e);
  for (cudaEvent_t e : st->pulled)
    if (e != nullptr) cudaEventDestroy(e);
  for (cudaEvent_t e : st->projected)
    if (e != nullptr) cudaEventDestroy(e);
  if (st->handle != nullptr && cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  if (st->cublas_ws != nullptr && cudaFree(st->cublas_ws) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
