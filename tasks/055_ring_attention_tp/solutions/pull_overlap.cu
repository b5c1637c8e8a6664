// Ring attention under TP x CP without the ring's lockstep and with the TP sum under compute.
//
//   main:     QKV GEMM | signal "k/v ready" | diagonal block | block c-1 | ... | block 0 (last),
//             in row chunks: chunk i's ctx, its Wo GEMM rows, signal "partial i ready"
//   cp side:  wait for the earlier CP ranks' signals | pull k/v of c-1 | pull c-2 | ... | pull 0
//   tp side:  per chunk i: wait for the partner's partial i, out[i] = own + partner's partial
//
// Against the baseline (transfer, attend, transfer, ..., project, all-reduce on one stream): the
// earlier CP positions' k/v come straight from their owners' workspaces on the copy engines, all
// at once instead of hop by hop, under the diagonal block's compute, and each block is attended
// to as soon as it has landed; the last block is split into row chunks whose output projection
// and TP sum (the partner's partial read through the peer mapping) run while the next chunk is
// attended to, so only the last chunk's sum is exposed. The online softmax state is the
// baseline's: fp32 (out, row max, row sum) carried from block to block.
//
// Ordering: a peer's k/v and partials are written once per call, before the signal that
// publishes them (kf_signal after the kernel that wrote them, epoch + 1 per call), and read only
// after it; the harness starts a call only when every rank's previous call has finished, so no
// rank overwrites its workspace while a peer still reads last call's values.
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
constexpr int kChunks = 4;       // row chunks of the last block
constexpr int kTpSlot = kMaxCp;  // pad slots: [0, kMaxCp) k/v ready, then one per chunk

constexpr int kDiagonal = 1;  // the queries' own block: causal, and the state starts here
constexpr int kLast = 2;      // the last visible block: normalise and write ctx

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

// 64 queries of (batch, head) against one k/v block; blocks cover query tiles tile0 ..
// tile0 + gridDim.x - 1. State: o [B, S, H, D] (unnormalised) and m,
// l [B, H, S]; read unless kDiagonal, written unless kLast, which writes ctx = o / l in bf16.
__global__ void __launch_bounds__(kThreads)
    FlashStep(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
              float* __restrict__ o, float* __restrict__ m, float* __restrict__ l,
              bf16* __restrict__ ctx, Dims dm, float scale, int flags, int tile0) {
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
  const int64_t hh = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wrow = warp * 16 + lane / 2, half = lane % 2;  // this lane pair's query row
  const int64_t qi = q0 + wrow;
  const bool diag = (flags & kDiagonal) != 0, valid = qi < dm.s;
  const int64_t srow = (b * dm.h + hh) * dm.s + qi;  // index into m, l
  const int64_t orow0 = ((b * dm.s + qi) * dm.h + hh) * dm.d;
  float* orow = os + wrow * ldo;
  const int c0 = half * (dp / 2), c1 = c0 + dp / 2;  // this lane's half of the row

  LoadTile(qs, q, dm, b, hh, q0);
  float mi = -INFINITY, li = 0.0f;
  for (int c = c0; c < c1; ++c) orow[c] = (!diag && valid && c < dm.d) ? o[orow0 + c] : 0.0f;
  if (!diag && valid) {
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
  if (flags & kLast) {
    const float inv = li > 0.0f ? 1.0f / li : 0.0f;
    for (int c = half; c < dm.d; c += 2) ctx[orow0 + c] = __float2bfloat16(orow[c] * inv);
  } else {
    for (int c = half; c < dm.d; c += 2) o[orow0 + c] = orow[c];
    if (half == 0) {
      m[srow] = mi;
      l[srow] = li;
    }
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

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
  cudaStream_t cp_side = nullptr, tp_side = nullptr;
  cudaEvent_t fork = nullptr, done = nullptr;
  cudaEvent_t pulled[kMaxCp] = {};
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
      ctx->signal_pad.nbytes < (kTpSlot + kChunks) * sizeof(uint32_t))
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
  cudaEvent_t* events[] = {&st->fork, &st->done};
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
  const int c = cp.rank;
  if (cp.size > kMaxCp || tp.size > 2) return 2;

  // Workspace (the same offsets on every rank): q, k, v (adjacent: the GEMM's batch stride is one
  // tensor), the pulled k/v of CP positions 0 .. c-1, ctx, the fp32 state (o, m, l) and the TP
  // partial. D % 8 == 0 keeps every tensor 16-byte aligned.
  const size_t kv_elems = static_cast<size_t>(rows * width);
  const size_t act = Align256(kv_elems * sizeof(bf16));
  const size_t qkv_bytes = Align256(3 * kv_elems * sizeof(bf16));
  const size_t o_bytes = Align256(kv_elems * sizeof(float));
  const size_t ml_bytes = Align256(static_cast<size_t>(rows * dm.h) * sizeof(float));
  const size_t part_bytes = Align256(static_cast<size_t>(rows * hid) * sizeof(bf16));
  const size_t pulled_at = qkv_bytes, ctx_at = pulled_at + 2 * (cp.size - 1) * act;
  const size_t o_at = ctx_at + act, part_at = o_at + o_bytes + 2 * ml_bytes;
  if (ctx->workspace.nbytes < part_at + part_bytes) return 1;
  char* ws = static_cast<char*>(ctx->workspace.data);
  bf16* q = reinterpret_cast<bf16*>(ws);
  const bf16* own_k = q + kv_elems;
  const bf16* own_v = q + 2 * kv_elems;
  auto slot = [&](int p, int which) {  // k (0) or v (1) of CP position p < c
    return reinterpret_cast<bf16*>(ws + pulled_at + (2 * p + which) * act);
  };
  bf16* attn = reinterpret_cast<bf16*>(ws + ctx_at);
  float* o = reinterpret_cast<float*>(ws + o_at);
  float* m = reinterpret_cast<float*>(ws + o_at + o_bytes);
  float* l = reinterpret_cast<float*>(ws + o_at + o_bytes + ml_bytes);
  bf16* part = reinterpret_cast<bf16*>(ws + part_at);
  const uint32_t epoch = ++st->epoch;
  auto pad_of = [&](int world_rank) {
    return static_cast<uint32_t*>(ctx->signal_pad.peers[world_rank]);
  };

  if (cudaEventRecord(st->fork, ctx->stream) != cudaSuccess ||
      cudaStreamWaitEvent(st->cp_side, st->fork, 0) != cudaSuccess ||
      cudaStreamWaitEvent(st->tp_side, st->fork, 0) != cudaSuccess)
    return 1;

  // QKV projection, then tell the later CP positions that this rank's k/v are in place.
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  if (GemmNT(st->handle, rows, width, hid, static_cast<const bf16*>(h->data), 0,
             static_cast<const bf16*>(wqkv->data), width * hid, q, static_cast<int64_t>(kv_elems),
             3) != CUBLAS_STATUS_SUCCESS)
    return 1;
  Slots later{};
  for (int p = c + 1; p < cp.size; ++p) later.p[p - c - 1] = pad_of(cp.ranks[p]) + c;
  if (c + 1 < cp.size) {
    Signal<<<1, 32, 0, ctx->stream>>>(later, cp.size - c - 1, epoch);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }

  // cp side: wait for the earlier positions, pull their k/v, nearest first.
  if (c > 0) {
    Slots earlier{};
    for (int p = 0; p < c; ++p) earlier.p[p] = pad_of(ctx->rank) + p;
    Wait<<<1, 32, 0, st->cp_side>>>(earlier, c, epoch);
    if (cudaGetLastError() != cudaSuccess) return 1;
    for (int p = c - 1; p >= 0; --p) {
      const char* peer = static_cast<const char*>(ctx->workspace.peers[cp.ranks[p]]);
      const size_t bytes = kv_elems * sizeof(bf16);
      if (cudaMemcpyAsync(slot(p, 0), peer + bytes, bytes, cudaMemcpyDeviceToDevice, st->cp_side) !=
              cudaSuccess ||
          cudaMemcpyAsync(slot(p, 1), peer + 2 * bytes, bytes, cudaMemcpyDeviceToDevice,
                          st->cp_side) != cudaSuccess ||
          cudaEventRecord(st->pulled[p], st->cp_side) != cudaSuccess)
        return 1;
    }
  }

  // Main: the diagonal block, then blocks c-1 .. 0 as they land; the last one in row chunks.
  const float scale = 1.0f / sqrtf(static_cast<float>(dm.d));
  const Smem lay(dm.dp);
  const int tiles = static_cast<int>((dm.s + kRows - 1) / kRows);
  auto attend = [&](const bf16* k, const bf16* v, int flags, int tile0, int ntiles) {
    const dim3 grid(static_cast<unsigned>(ntiles), static_cast<unsigned>(dm.h),
                    static_cast<unsigned>(dm.b));
    FlashStep<<<grid, kThreads, lay.total, ctx->stream>>>(q, k, v, o, m, l, attn, dm, scale, flags,
                                                          tile0);
    return cudaGetLastError() == cudaSuccess;
  };
  for (int p = c; p > 0; --p) {  // every block but the last (position 0)
    const bool diag = p == c;
    if (!diag && cudaStreamWaitEvent(ctx->stream, st->pulled[p], 0) != cudaSuccess) return 1;
    if (!attend(diag ? own_k : slot(p, 0), diag ? own_v : slot(p, 1), diag ? kDiagonal : 0, 0,
                tiles))
      return 1;
  }
  if (c > 0 && cudaStreamWaitEvent(ctx->stream, st->pulled[0], 0) != cudaSuccess) return 1;
  const bf16* last_k = c == 0 ? own_k : slot(0, 0);
  const bf16* last_v = c == 0 ? own_v : slot(0, 1);
  const int last_flags = kLast | (c == 0 ? kDiagonal : 0);
  const bf16* wo_data = static_cast<const bf16*>(wo->data);
  bf16* y = static_cast<bf16*>(out->data);
  if (tp.size == 1) {  // W = 2: no TP sum, project straight into out
    if (!attend(last_k, last_v, last_flags, 0, tiles)) return 1;
    return GemmNT(st->handle, rows, hid, width, attn, 0, wo_data, 0, y, 0, 1) ==
                   CUBLAS_STATUS_SUCCESS
               ? 0
               : 1;
  }
  const int partner = tp.ranks[1 - tp.rank];
  const bf16* their_part = reinterpret_cast<const bf16*>(
      static_cast<const char*>(ctx->workspace.peers[partner]) + part_at);
  const int chunks = tiles < kChunks ? tiles : kChunks;
  const int per = (tiles + chunks - 1) / chunks;
  for (int i = 0; i * per < tiles; ++i) {
    const int t0 = i * per, nt = tiles - t0 < per ? tiles - t0 : per;
    const int64_t r0 = static_cast<int64_t>(t0) * kRows;
    const int64_t r1 = r0 + nt * kRows < dm.s ? r0 + nt * kRows : dm.s;
    if (!attend(last_k, last_v, last_flags, t0, nt)) return 1;
    // part rows [r0, r1) of every batch, then tell the partner.
    if (GemmNT(st->handle, r1 - r0, hid, width, attn + r0 * width, dm.s * width, wo_data, 0,
               part + r0 * hid, dm.s * hid, static_cast<int>(dm.b)) != CUBLAS_STATUS_SUCCESS)
      return 1;
    Slots to{};
    to.p[0] = pad_of(partner) + kTpSlot + i;
    Signal<<<1, 32, 0, ctx->stream>>>(to, 1, epoch);
    if (cudaGetLastError() != cudaSuccess) return 1;
    if (cudaEventRecord(st->projected[i], ctx->stream) != cudaSuccess ||
        cudaStreamWaitEvent(st->tp_side, st->projected[i], 0) != cudaSuccess)
      return 1;
    const int64_t n = dm.b * (r1 - r0) * hid;
    const unsigned blocks = static_cast<unsigned>(n / 1024 + 1 < 1024 ? n / 1024 + 1 : 1024);
    Slots mine{};
    mine.p[0] = pad_of(ctx->rank) + kTpSlot + i;
    Wait<<<1, 32, 0, st->tp_side>>>(mine, 1, epoch);
    SumChunk<<<blocks, 256, 0, st->tp_side>>>(part, their_part, y, dm.b, dm.s, hid, r0, r1);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  if (cudaEventRecord(st->done, st->tp_side) != cudaSuccess ||
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
  for (cudaEvent_t e : {st->fork, st->done})
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
