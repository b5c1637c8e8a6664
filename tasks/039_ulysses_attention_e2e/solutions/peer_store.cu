// Ulysses attention with both all-to-alls fused into the kernels that produce the data, through
// peer stores; no pack, no unpack, no separate transfer:
//   0. start barrier (every rank is in this call, so no peer still reads the buffers written next);
//   1. the QKV projection writes each head group straight into its owner's workspace: for rank p
//      the GEMM of this rank's tokens with the rows of q, k and v for heads p*hl .. (p+1)*hl-1
//      (cuBLAS, batched over q/k/v, and over the batch with pointer arrays when B > 1) stores into
//      rank p's full-sequence buffer [B, S, 3, hl, D] at positions rank*T .. rank*T+T-1;
//   2. barrier (every peer's rows have arrived);
//   3. attention of the hl local heads over all S tokens (the baseline's flash tile kernel), each
//      query's output row written into the workspace of the rank that owns the token, as columns
//      rank*hl*D .. of its [B, T, hidden] (coalesced 16-byte stores through shared memory);
//   4. barrier; 5. out = joined @ wo^T (cuBLAS).
// Against the baseline this removes two pack kernels, two unpack kernels and both NCCL
// all-to-alls; the transfers ride on the GEMM's and the attention's own stores over NVLink.
//
// Ordering: barriers are one block that, per peer, fences (__threadfence_system), release-stores
// the call's epoch into slot [phase * W + rank] of the peer's pad and acquire-waits for slot
// [phase * W + peer] of its own. Stream order puts the producing kernel before the fence. The
// epoch is the call count, the same on every rank (the pad is zeroed before kf_setup). No end
// barrier: a rank's buffers are written by peers only after they pass the next call's start
// barrier, which this rank reaches only after its last read (stream order).
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
  void** ptrs = nullptr;  // A, B, C pointer arrays of the batched projection (B > 1)
  int64_t batch_count = 0;
  uint32_t epoch = 0;
};

struct Peers {
  void* p[KF_MAX_RANKS];
};

__global__ void Barrier(kf_buffer pad, int phase, int rank, int world, uint32_t epoch) {
  if (static_cast<int>(threadIdx.x) < world) {
    __threadfence_system();
    kf_signal(static_cast<uint32_t*>(pad.peers[threadIdx.x]) + phase * world + rank, epoch);
    kf_wait(static_cast<const uint32_t*>(pad.data) + phase * world + threadIdx.x, epoch);
  }
}

int LaunchBarrier(kf_ctx* ctx, int phase, uint32_t epoch) {
  Barrier<<<1, 32, 0, ctx->stream>>>(ctx->signal_pad, phase, ctx->rank, ctx->world_size, epoch);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

// Batch e = (p * B + b) * 3 + i: head group p of part i (q, k, v) of batch b of this rank's tokens.
__global__ void ProjectionPointers(const bf16* wqkv, const bf16* h, Peers full, void** ptrs,
                                   int64_t count, int64_t b_, int64_t t, int64_t hidden,
                                   int64_t ql, int rank, int world) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= count) return;
  const int64_t i = e % 3, b = e / 3 % b_, p = e / 3 / b_;
  ptrs[e] = const_cast<bf16*>(wqkv + (i * hidden + p * ql) * hidden);
  ptrs[count + e] = const_cast<bf16*>(h + b * t * hidden);
  ptrs[2 * count + e] = static_cast<bf16*>(full.p[p]) + ((b * world * t + rank * t) * 3 + i) * ql;
}

// ---------------------------------------------------------------------------------------------
// Attention: q, k, v rows of [B, S, 3, hl, D] (row stride 3 * hl * D); the output row of query s
// goes to rank s / T's [B, T, hidden] at row s % T, columns rank * hl * D + head * D.

struct Dims {
  int64_t b, s, t, hl, d, hidden;
  int dp;  // d rounded up to 16
  int rank;
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

__device__ inline bf16* OutRow(const Peers& dst, const Dims& dm, int64_t b, int64_t h, int64_t s) {
  const int64_t p = s / dm.t, t = s - p * dm.t;
  return static_cast<bf16*>(dst.p[p]) + (b * dm.t + t) * dm.hidden + (dm.rank * dm.hl + h) * dm.d;
}

__global__ void __launch_bounds__(kWarps * 32)
    Flash(const bf16* __restrict__ qkv, Peers dst, Dims dm, float scale) {
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

  // Normalise into the warp's rows of the (no longer read) q tile, then store them to their
  // owners 16 bytes per lane, each row contiguous.
  {
    const float* orow = os + (warp * 16 + row) * ldo;
    bf16* qrow = qs + (warp * 16 + row) * ldh;
    const float inv = 1.0f / l;
    for (int c = half * (dp / 2); c < (half + 1) * (dp / 2); ++c)
      qrow[c] = __float2bfloat16(orow[c] * inv);
  }
  __syncwarp();
  const int64_t first = q0 + warp * 16;
  if (dm.d % 8 == 0) {
    const int vecs = static_cast<int>(dm.d / 8);
    for (int i = lane; i < 16 * vecs; i += 32) {
      const int r = i / vecs, c = (i % vecs) * 8;
      if (first + r < dm.s)
        *reinterpret_cast<uint4*>(OutRow(dst, dm, b, h, first + r) + c) =
            *reinterpret_cast<const uint4*>(qs + (warp * 16 + r) * ldh + c);
    }
  } else {
    for (int i = lane; i < 16 * dm.d; i += 32) {
      const int r = static_cast<int>(i / dm.d), c = static_cast<int>(i % dm.d);
      if (first + r < dm.s) OutRow(dst, dm, b, h, first + r)[c] = qs[(warp * 16 + r) * ldh + c];
    }
  }
}

// Row-major y[m, n] = x[m, k] @ w[n, k]^T as column-major y^T = op_T(w) x^T.
int Linear(cublasHandle_t handle, const void* x, const void* w, void* y, int64_t m, int64_t n,
           int64_t k) {
  if (m == 0) return 0;
  const float alpha = 1.0f, beta = 0.0f;
  return cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                      static_cast<int>(k), &alpha, w, CUDA_R_16BF, static_cast<int>(k), x,
                      CUDA_R_16BF, static_cast<int>(k), &beta, y, CUDA_R_16BF,
                      static_cast<int>(n), CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS
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
  if (ctx->signal_pad.nbytes < 3 * static_cast<size_t>(ctx->world_size) * sizeof(uint32_t))
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
  st->batch_count = 3 * h->shape[0] * ctx->world_size;
  if (cudaMalloc(&st->ptrs, 3 * static_cast<size_t>(st->batch_count) * sizeof(void*)) !=
      cudaSuccess)
    return 1;
  st->epoch = 0;  // the pad was zeroed before this setup
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor *h = kf_input(ctx, "h"), *wqkv = kf_input(ctx, "wqkv"),
                  *wo = kf_input(ctx, "wo");
  kf_tensor* out = kf_output(ctx, "out");
  if (st == nullptr || h == nullptr || wqkv == nullptr || wo == nullptr || out == nullptr ||
      h->dtype != KF_BF16)
    return 2;
  const int world = ctx->world_size, rank = ctx->rank;
  const int64_t b = h->shape[0], t = h->shape[1], hidden = h->shape[2];
  const int64_t heads = static_cast<int64_t>(kf_param(ctx, "H", 0));
  const int64_t d = static_cast<int64_t>(kf_param(ctx, "D", 0));
  const int64_t hl = heads / world, ql = hl * d, s = world * t;
  if (3 * b * world != st->batch_count) return 2;
  cudaStream_t stream = ctx->stream;

  // Workspace: the full-sequence q/k/v of the local heads [B, S, 3, ql], then the joined
  // attention output of this rank's tokens [B, T, hidden]; same offsets on every rank.
  const size_t full_bytes = Align256(static_cast<size_t>(b * s * 3 * ql) * sizeof(bf16));
  const size_t joined_bytes = static_cast<size_t>(b * t * hidden) * sizeof(bf16);
  if (ctx->workspace.nbytes < full_bytes + joined_bytes) return 1;
  Peers full{}, joined{};
  for (int p = 0; p < world; ++p) {
    full.p[p] = ctx->workspace.peers[p];
    joined.p[p] = static_cast<char*>(ctx->workspace.peers[p]) + full_bytes;
  }
  const uint32_t epoch = ++st->epoch;
  if (cublasSetStream(st->handle, stream) != CUBLAS_STATUS_SUCCESS) return 1;

  if (LaunchBarrier(ctx, 0, epoch) != 0) return 1;
  // 1. Projection into the owners' buffers. Batch i (q, k, v) of head group p: rows
  // (i * H + p * hl) * D .. of wqkv, output columns i * ql .. of rows (b*S + rank*T + t) * 3.
  const float alpha = 1.0f, beta = 0.0f;
  const bf16* w = static_cast<const bf16*>(wqkv->data);
  const bf16* x = static_cast<const bf16*>(h->data);
  if (b == 1) {
    for (int p = 0; p < world; ++p) {
      bf16* c = static_cast<bf16*>(full.p[p]) + rank * t * 3 * ql;
      if (cublasGemmStridedBatchedEx(
              st->handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(ql), static_cast<int>(t),
              static_cast<int>(hidden), &alpha, w + p * ql * hidden, CUDA_R_16BF,
              static_cast<int>(hidden), hidden * hidden, x, CUDA_R_16BF, static_cast<int>(hidden),
              0, &beta, c, CUDA_R_16BF, static_cast<int>(3 * ql), ql, 3, CUBLAS_COMPUTE_32F,
              CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
        return 1;
    }
  } else {
    const int64_t count = st->batch_count;
    ProjectionPointers<<<static_cast<unsigned>((count + 127) / 128), 128, 0, stream>>>(
        w, x, full, st->ptrs, count, b, t, hidden, ql, rank, world);
    if (cudaGetLastError() != cudaSuccess) return 1;
    if (cublasGemmBatchedEx(st->handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(ql),
                            static_cast<int>(t), static_cast<int>(hidden), &alpha, st->ptrs,
                            CUDA_R_16BF, static_cast<int>(hidden), st->ptrs + count, CUDA_R_16BF,
                            static_cast<int>(hidden), &beta, st->ptrs + 2 * count, CUDA_R_16BF,
                            static_cast<int>(3 * ql), static_cast<int>(count), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
      return 1;
  }
  // 2. Every rank's tokens have arrived.
  if (LaunchBarrier(ctx, 1, epoch) != 0) return 1;
  // 3. Attention, each output row stored into its owner's joined buffer.
  const Dims dm{b, s, t, hl, d, hidden, static_cast<int>((d + 15) / 16 * 16), rank};
  const Smem smem(dm.dp);
  const dim3 grid(static_cast<unsigned>((s + kRows - 1) / kRows), static_cast<unsigned>(hl),
                  static_cast<unsigned>(b));
  Flash<<<grid, kWarps * 32, smem.total, stream>>>(static_cast<const bf16*>(ctx->workspace.data),
                                                   joined, dm, 1.0f / sqrtf(static_cast<float>(d)));
  if (cudaGetLastError() != cudaSuccess) return 1;
  // 4. Every head group of this rank's tokens has arrived; 5. the output projection.
  if (LaunchBarrier(ctx, 2, epoch) != 0) return 1;
  return Linear(st->handle, joined.p[rank], wo->data, out->data, b * t, hidden, hidden);
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = 0;
  if (st->handle != nullptr && cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  if (st->cublas_ws != nullptr && cudaFree(st->cublas_ws) != cudaSuccess) rc = 1;
  if (st->ptrs != nullptr && cudaFree(st->ptrs) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
