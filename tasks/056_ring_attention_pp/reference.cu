// Baseline for PKB #56: two attention layers as a two-stage pipeline, each stage's layer with
// ring attention over its CP group, in PKB's order and on one stream. A stage-1 rank first receives
// its input from its stage-0 partner (kf_recv, PKB's recv_forward); then every rank runs its layer:
//   1. q, k, v = x @ Wqkv^T: one strided-batched cuBLAS GEMM (fp32 accumulation), q, k and v
//      written as three contiguous [B, S, H, D] bf16 tensors (PKB's q/k/v.contiguous()),
//   2. CP steps; at step s the rank holds the k/v block of CP position c - s and passes it on
//      (kf_send to the next CP rank, kf_recv from the previous one, one kf_group_start/end: PKB's
//      batch_isend_irecv); blocks not in the future are attended to by a flash tile kernel that
//      carries the online softmax's fp32 state (out, row max, row sum) from block to block (the
//      same merge as update_out_and_lse) and, at the last visible block, writes ctx in bf16,
//   3. out = ctx @ Wo^T (cuBLAS, rounded to bf16);
// and a stage-0 rank sends out to its stage-1 partner (kf_send, PKB's send_forward).
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

constexpr int kDiagonal = 1;  // the queries' own block: causal, and the state starts here
constexpr int kLast = 2;      // the last visible block: normalise and write ctx

struct Dims {
  int64_t b, s, h, d;
  int dp;  // d rounded up to 16
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

// 64 queries of (batch, head) against one k/v block. State: o [B, S, H, D] (unnormalised) and m,
// l [B, H, S]; read unless kDiagonal, written unless kLast, which writes ctx = o / l in bf16.
__global__ void __launch_bounds__(kThreads)
    FlashStep(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
              float* __restrict__ o, float* __restrict__ m, float* __restrict__ l,
              bf16* __restrict__ ctx, Dims dm, float scale, int flags) {
  extern __shared__ __align__(256) unsigned char smem[];
  const Smem lay(dm.dp);
  const int dp = dm.dp, ldh = dp + 8, ldo = dp + 4;
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = reinterpret_cast<bf16*>(smem + lay.k);
  bf16* vs = reinterpret_cast<bf16*>(smem + lay.v);
  float* ss = reinterpret_cast<float*>(smem + lay.s);
  bf16* ps = reinterpret_cast<bf16*>(smem + lay.p);
  float* os = reinterpret_cast<float*>(smem + lay.o);

  const int64_t tiles = (dm.s + kRows - 1) / kRows;
  const int64_t q0 = (tiles - 1 - blockIdx.x) * kRows;  // the longest (causal) tiles first
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

// Row-major c[batch][m, n] = a[m, k] @ b[batch][n, k]^T (b: PyTorch's [out, in] weight), bf16 in
// and out, fp32 accumulation: column-major c^T = b a^T.
cublasStatus_t GemmNT(cublasHandle_t handle, int64_t m, int64_t n, int64_t k, const bf16* a,
                      const bf16* b, bf16* c, int batch) {
  const float one = 1.0f, zero = 0.0f;
  return cublasGemmStridedBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n),
                                    static_cast<int>(m), static_cast<int>(k), &one, b, CUDA_R_16BF,
                                    static_cast<int>(k), n * k, a, CUDA_R_16BF, static_cast<int>(k),
                                    0, &zero, c, CUDA_R_16BF, static_cast<int>(n), m * n, batch,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  State* st = new State;
  ctx->user = st;
  const kf_tensor* w = kf_input(ctx, "wqkv");
  if (w == nullptr || w->ndim != 3 || w->shape[1] < 8 || w->shape[1] > kMaxD ||
      w->shape[1] % 8 != 0)
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
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor *h = kf_input(ctx, "h"), *wqkv = kf_input(ctx, "wqkv"), *wo = kf_input(ctx, "wo");
  kf_tensor* out = kf_output(ctx, "out");
  const int cpi = kf_group_index(ctx, "cp"), ppi = kf_group_index(ctx, "pp");
  if (h == nullptr || wqkv == nullptr || wo == nullptr || out == nullptr || cpi < 0 || ppi < 0 ||
      out->dtype != KF_BF16 || out->ndim != 3 || wqkv->ndim != 3)
    return 2;
  Dims dm;
  dm.b = out->shape[0];
  dm.s = out->shape[1];  // h has no rows on stage 1
  dm.h = wqkv->shape[0] / 3;
  dm.d = wqkv->shape[1];
  dm.dp = static_cast<int>((dm.d + 15) / 16 * 16);
  const int64_t hid = out->shape[2], rows = dm.b * dm.s, width = dm.h * dm.d;
  const kf_group& cp = ctx->groups[cpi];
  const kf_group& pp = ctx->groups[ppi];
  const int c = cp.rank, next = cp.ranks[(c + 1) % cp.size];
  const int prev = cp.ranks[(c + cp.size - 1) % cp.size];
  const size_t x_elems = static_cast<size_t>(rows * hid);

  // Workspace: q, k, v (adjacent: the GEMM's batch stride is one tensor), two k/v receive slots,
  // ctx, the fp32 state (o, m, l) and stage 1's received input. D % 8 == 0 keeps every tensor
  // 16-byte aligned.
  const size_t kv_elems = static_cast<size_t>(rows * width);
  const size_t act = Align256(kv_elems * sizeof(bf16));
  const size_t qkv_bytes = Align256(3 * kv_elems * sizeof(bf16));
  const size_t o_bytes = Align256(kv_elems * sizeof(float));
  const size_t ml_bytes = Align256(static_cast<size_t>(rows * dm.h) * sizeof(float));
  const size_t x_bytes = Align256(x_elems * sizeof(bf16));
  if (ctx->workspace.nbytes < qkv_bytes + 5 * act + o_bytes + 2 * ml_bytes + x_bytes) return 1;
  char* ws = static_cast<char*>(ctx->workspace.data);
  bf16* qkv = reinterpret_cast<bf16*>(ws);
  char* f = ws + qkv_bytes;
  bf16* slot_k[2] = {reinterpret_cast<bf16*>(f), reinterpret_cast<bf16*>(f + act)};
  bf16* slot_v[2] = {reinterpret_cast<bf16*>(f + 2 * act), reinterpret_cast<bf16*>(f + 3 * act)};
  bf16* attn = reinterpret_cast<bf16*>(f + 4 * act);
  f += 5 * act;
  float* o = reinterpret_cast<float*>(f);
  float* m = reinterpret_cast<float*>(f + o_bytes);
  float* l = reinterpret_cast<float*>(f + o_bytes + ml_bytes);
  bf16* x = reinterpret_cast<bf16*>(f + o_bytes + 2 * ml_bytes);

  // Every rank closes the same sequence of groups: stage 0's ring (cp.size - 1 groups), the
  // hand-over, stage 1's ring. A rank with nothing in a group closes an empty one, which NCCL
  // takes as a no-op and the peer-copy backend (ranks sharing a GPU) needs: there a group is
  // matched across all ranks (docs/abi.md, "Harness collectives").
  auto empty_groups = [&](int n) {
    for (int i = 0; i < n; ++i)
      if (kf_group_start(ctx) != 0 || kf_group_end(ctx) != 0) return false;
    return true;
  };
  const bool first = pp.rank == 0;
  if (!first) {  // stage 1: the layer input is stage 0's output
    if (!empty_groups(cp.size - 1) || kf_group_start(ctx) != 0 ||
        kf_recv(ctx, x, x_elems, KF_BF16, pp.ranks[0]) != 0 || kf_group_end(ctx) != 0)
      return 1;
  } else if (h->shape[1] != dm.s || h->shape[2] != hid) {
    return 2;
  }
  const bf16* in = first ? static_cast<const bf16*>(h->data) : x;

  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  if (GemmNT(st->handle, rows, width, hid, in, static_cast<const bf16*>(wqkv->data), qkv, 3) !=
      CUBLAS_STATUS_SUCCESS)
    return 1;
  const bf16* q = qkv;
  const bf16* cur_k = qkv + kv_elems;
  const bf16* cur_v = qkv + 2 * kv_elems;
  const dim3 grid(static_cast<unsigned>((dm.s + kRows - 1) / kRows), static_cast<unsigned>(dm.h),
                  static_cast<unsigned>(dm.b));
  const float scale = 1.0f / sqrtf(static_cast<float>(dm.d));
  const Smem lay(dm.dp);
  for (int step = 0; step < cp.size; ++step) {
    const bool pass_on = step + 1 < cp.size;
    if (pass_on) {
      if (kf_group_start(ctx) != 0 || kf_send(ctx, cur_k, kv_elems, KF_BF16, next) != 0 ||
          kf_send(ctx, cur_v, kv_elems, KF_BF16, next) != 0 ||
          kf_recv(ctx, slot_k[step % 2], kv_elems, KF_BF16, prev) != 0 ||
          kf_recv(ctx, slot_v[step % 2], kv_elems, KF_BF16, prev) != 0 || kf_group_end(ctx) != 0)
        return 1;
    }
    if (step <= c) {  // the block of CP position c - step: not in the future
      const int flags = (step == 0 ? kDiagonal : 0) | (step == c ? kLast : 0);
      FlashStep<<<grid, kThreads, lay.total, ctx->stream>>>(q, cur_k, cur_v, o, m, l, attn, dm,
                                                            scale, flags);
      if (cudaGetLastError() != cudaSuccess) return 1;
    }
    if (pass_on) {
      cur_k = slot_k[step % 2];
      cur_v = slot_v[step % 2];
    }
  }
  bf16* y = static_cast<bf16*>(out->data);
  if (GemmNT(st->handle, rows, hid, width, attn, static_cast<const bf16*>(wo->data), y, 1) !=
      CUBLAS_STATUS_SUCCESS)
    return 1;
  if (first && pp.size > 1) {  // send_forward, then stage 1's ring goes on without this rank
    if (kf_group_start(ctx) != 0 || kf_send(ctx, y, x_elems, KF_BF16, pp.ranks[1]) != 0 ||
        kf_group_end(ctx) != 0 || !empty_groups(cp.size - 1))
      return 1;
  }
  return 0;
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
