// Ulysses attention with both all-to-alls fused into the kernels that produce the data, through
// peer stores (no pack, no unpack, no separate transfer), and a register-resident flash kernel:
//   0. start barrier (every rank is in this call, so no peer still reads the buffers written next);
//   1. the QKV projection writes each head group straight into its owner's workspace: for rank p
//      the GEMM of this rank's tokens with the rows of q, k and v for heads p*hl .. (p+1)*hl-1
//      (cuBLAS, batched over q/k/v, and over the batch with pointer arrays when B > 1) stores into
//      rank p's full-sequence buffer [B, S, 3, hl, D] at positions rank*T .. rank*T+T-1;
//   2. barrier (every peer's rows have arrived);
//   3. attention of the hl local heads over all S tokens, FlashAttention-2 style on mma.sync
//      (scores and probabilities in registers, cp.async double buffering of k and v), each
//      query's output row written into the workspace of the rank that owns the token, as columns
//      rank*hl*D .. of its [B, T, hidden] (coalesced 16-byte stores through shared memory);
//   4. barrier; 5. out = joined @ wo^T (cuBLAS).
// This is peer_store.cu with a faster attention kernel, which is most of the time at 32k tokens.
// Against the baseline it removes two pack kernels, two unpack kernels and both NCCL all-to-alls
// (the transfers ride on the GEMM's and the attention's own stores over NVLink), and the
// baseline's round trips of scores and probabilities through shared memory.
//
// Ordering: barriers are one block that, per peer, fences (__threadfence_system), release-stores
// the call's epoch into slot [phase * W + rank] of the peer's pad and acquire-waits for slot
// [phase * W + peer] of its own. Stream order puts the producing kernel before the fence. The
// epoch is the call count, the same on every rank (the pad is zeroed before kf_setup). No end
// barrier: a rank's buffers are written by peers only after they pass the next call's start
// barrier, which this rank reaches only after its last read (stream order).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

using bf16 = __nv_bfloat16;

constexpr size_t kCublasWorkspace = 32u << 20;
constexpr int kRows = 64;  // queries per block: 4 warps x 16
constexpr int kKeys = 64;  // keys per tile
constexpr int kWarps = 4;
constexpr int kMaxD = 128;

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
// Attention, FlashAttention-2's forward on mma.sync: q, k, v rows of [B, S, 3, hl, D] (row stride
// 3 * hl * D). A block holds 64 queries of one (batch, head) in shared memory, 16 per warp, and
// walks the keys in tiles of 64, the next tile's k and v loaded with cp.async while this one is
// used. Scores, probabilities and the output stay in registers: S = Q K^T (bf16 m16n8k16, fp32
// accumulation), the online softmax in base 2, P rounded to bf16 as the A operand of O += P V.
// The output row of query s goes to rank s / T's [B, T, hidden] at row s % T, columns
// rank * hl * D + head * D. D is padded with zeros to DP (16, 32, 64 or 128).

struct Dims {
  int64_t b, s, t, hl, d, hidden;
  int rank;
};

template <int DP>
constexpr size_t SmemBytes() {  // q [64], k [2][64], v [2][64] rows of DP + 8 bf16
  return static_cast<size_t>(kRows + 4 * kKeys) * (DP + 8) * sizeof(bf16);
}

__device__ inline uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, zero-filled when !valid (src must still be a valid address).
__device__ inline void CpAsync16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ inline void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ inline void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ inline void Ldsm4(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}
__device__ inline void Ldsm4T(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(p)));
}

// c += a (16x16, row) * b (16x8, col), bf16 in, fp32 accumulation.
__device__ inline void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ inline uint32_t PackBf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // lo in the low half
  return *reinterpret_cast<uint32_t*>(&v);
}

// rows x DP tile of head hh of part `which` (0 q, 1 k, 2 v) from row row0, zero past S and D.
template <int DP>
__device__ void LoadTile(bf16* dst, const bf16* qkv, const Dims& dm, int64_t b, int which,
                         int64_t hh, int64_t row0, int rows) {
  constexpr int kLd = DP + 8;
  const int64_t stride = 3 * dm.hl * dm.d;
  const bf16* base = qkv + b * dm.s * stride + (which * dm.hl + hh) * dm.d;
  if (dm.d % 8 == 0) {
    constexpr int kVecs = DP / 8;
    for (int i = threadIdx.x; i < rows * kVecs; i += blockDim.x) {
      const int r = i / kVecs, c = (i % kVecs) * 8;
      const int64_t row = row0 + r;
      const bool valid = row < dm.s && c < dm.d;
      CpAsync16(dst + r * kLd + c, valid ? base + row * stride + c : qkv, valid);
    }
  } else {  // odd head sizes (check sizes only): plain loads
    for (int i = threadIdx.x; i < rows * DP; i += blockDim.x) {
      const int r = i / DP, c = i % DP;
      const int64_t row = row0 + r;
      dst[r * kLd + c] = (row < dm.s && c < dm.d) ? base[row * stride + c] : __float2bfloat16(0.0f);
    }
  }
}

__device__ inline bf16* OutRow(const Peers& dst, const Dims& dm, int64_t b, int64_t h, int64_t s) {
  const int64_t p = s / dm.t, t = s - p * dm.t;
  return static_cast<bf16*>(dst.p[p]) + (b * dm.t + t) * dm.hidden + (dm.rank * dm.hl + h) * dm.d;
}

template <int DP>
__global__ void __launch_bounds__(kWarps * 32, 2)
    Flash(const bf16* __restrict__ qkv, Peers dst, Dims dm, float scale_log2) {
  constexpr int kLd = DP + 8, kN = DP / 8, kK = DP / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = qs + kRows * kLd;      // [2][kKeys][kLd]
  bf16* vs = ks + 2 * kKeys * kLd;  // [2][kKeys][kLd]
  const int64_t q0 = blockIdx.x * static_cast<int64_t>(kRows), h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c4 = lane % 4;
  const int64_t tiles = (dm.s + kKeys - 1) / kKeys;

  LoadTile<DP>(qs, qkv, dm, b, 0, h, q0, kRows);
  LoadTile<DP>(ks, qkv, dm, b, 1, h, 0, kKeys);
  LoadTile<DP>(vs, qkv, dm, b, 2, h, 0, kKeys);
  CpAsyncCommit();

  uint32_t qf[kK][4];
  float o[kN][4];
  #pragma unroll
  for (int n = 0; n < kN; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8 of the warp

  for (int64_t j = 0; j < tiles; ++j) {
    if (j + 1 < tiles) {  // the stage of tile j - 1, released by its closing __syncthreads
      const int next = static_cast<int>((j + 1) & 1);
      LoadTile<DP>(ks + next * kKeys * kLd, qkv, dm, b, 1, h, (j + 1) * kKeys, kKeys);
      LoadTile<DP>(vs + next * kKeys * kLd, qkv, dm, b, 2, h, (j + 1) * kKeys, kKeys);
      CpAsyncCommit();
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    if (j == 0) {
      #pragma unroll
      for (int kk = 0; kk < kK; ++kk)
        Ldsm4(qf[kk], qs + (warp * 16 + lane % 16) * kLd + kk * 16 + 8 * (lane / 16));
    }
    const bf16* kt = ks + (j & 1) * kKeys * kLd;
    const bf16* vt = vs + (j & 1) * kKeys * kLd;

    // S = Q K^T: the warp's 16 queries x 64 keys, 8 tiles of 8 keys.
    float sc[8][4];
    #pragma unroll
    for (int n = 0; n < 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
    #pragma unroll
    for (int np = 0; np < 4; ++np) {
      #pragma unroll
      for (int kk = 0; kk < kK; ++kk) {
        uint32_t r[4];
        Ldsm4(r, kt + (np * 16 + lane % 8 + 8 * (lane / 16)) * kLd + kk * 16 + 8 * (lane / 8 % 2));
        Mma(sc[2 * np], qf[kk], r[0], r[1]);
        Mma(sc[2 * np + 1], qf[kk], r[2], r[3]);
      }
    }

    // Online softmax in base 2; element e of tile n is row g + 8 * (e / 2), key n * 8 + 2 * c4 +
    // e % 2. A quad of lanes holds a row.
    const int64_t k0 = j * kKeys;
    float mx[2] = {m[0], m[1]};
    #pragma unroll
    for (int n = 0; n < 8; ++n) {
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float x = k0 + n * 8 + 2 * c4 + e % 2 < dm.s ? sc[n][e] * scale_log2 : -INFINITY;
        sc[n][e] = x;
        mx[e / 2] = fmaxf(mx[e / 2], x);
      }
    }
    float alpha[2];
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      alpha[r] = exp2f(m[r] - mx[r]);  // finite mx: every tile holds a key; 0 while m is -inf
      m[r] = mx[r];
      l[r] *= alpha[r];  // this lane's part of the row sum; the quad is summed at the end
    }
    uint32_t pf[4][4];  // P as the A operand, one fragment per 16 keys
    #pragma unroll
    for (int n = 0; n < 8; ++n) {
      float p[4];
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        p[e] = exp2f(sc[n][e] - m[e / 2]);
        l[e / 2] += p[e];
      }
      pf[n / 2][(n % 2) * 2] = PackBf16(p[0], p[1]);
      pf[n / 2][(n % 2) * 2 + 1] = PackBf16(p[2], p[3]);
    }
    #pragma unroll
    for (int n = 0; n < kN; ++n) {
      o[n][0] *= alpha[0];
      o[n][1] *= alpha[0];
      o[n][2] *= alpha[1];
      o[n][3] *= alpha[1];
    }

    // O += P V: 16 keys at a time, 16 output columns per ldmatrix.
    #pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
      #pragma unroll
      for (int np = 0; np < kN / 2; ++np) {
        uint32_t r[4];
        Ldsm4T(r, vt + (kc * 16 + lane % 8 + 8 * (lane / 8 % 2)) * kLd + np * 16 + 8 * (lane / 16));
        Mma(o[2 * np], pf[kc], r[0], r[1]);
        Mma(o[2 * np + 1], pf[kc], r[2], r[3]);
      }
    }
    __syncthreads();  // this stage is loaded again for tile j + 2
  }

  // Normalise into the warp's rows of the q tile (read into registers at the first tile), then
  // store them to their owners, 16 bytes per lane, each row contiguous.
  #pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  const float inv0 = 1.0f / l[0], inv1 = 1.0f / l[1];
  bf16* row0 = qs + (warp * 16 + g) * kLd + 2 * c4;
  bf16* row1 = row0 + 8 * kLd;
  #pragma unroll
  for (int n = 0; n < kN; ++n) {
    *reinterpret_cast<uint32_t*>(row0 + n * 8) = PackBf16(o[n][0] * inv0, o[n][1] * inv0);
    *reinterpret_cast<uint32_t*>(row1 + n * 8) = PackBf16(o[n][2] * inv1, o[n][3] * inv1);
  }
  __syncwarp();
  const int64_t first = q0 + warp * 16;
  if (dm.d % 8 == 0) {
    const int vecs = static_cast<int>(dm.d / 8);
    for (int i = lane; i < 16 * vecs; i += 32) {
      const int r = i / vecs, c = (i % vecs) * 8;
      if (first + r < dm.s)
        *reinterpret_cast<uint4*>(OutRow(dst, dm, b, h, first + r) + c) =
            *reinterpret_cast<const uint4*>(qs + (warp * 16 + r) * kLd + c);
    }
  } else {
    for (int i = lane; i < 16 * dm.d; i += 32) {
      const int r = static_cast<int>(i / dm.d), c = static_cast<int>(i % dm.d);
      if (first + r < dm.s) OutRow(dst, dm, b, h, first + r)[c] = qs[(warp * 16 + r) * kLd + c];
    }
  }
}

template <int DP>
int PrepareFlash() {
  return cudaFuncSetAttribute(Flash<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(SmemBytes<DP>())) == cudaSuccess
             ? 0
             : 1;
}

template <int DP>
int LaunchFlash(const bf16* qkv, const Peers& dst, const Dims& dm, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((dm.s + kRows - 1) / kRows), static_cast<unsigned>(dm.hl),
                  static_cast<unsigned>(dm.b));
  const float scale_log2 = 1.4426950408889634f / sqrtf(static_cast<float>(dm.d));
  Flash<DP><<<grid, kWarps * 32, SmemBytes<DP>(), stream>>>(qkv, dst, dm, scale_log2);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

// prepare: set the kernel's shared memory limit (setup); else launch.
int Attention(bool prepare, const bf16* qkv, const Peers& dst, const Dims& dm,
              cudaStream_t stream) {
  // Head sizes padded to 16, 32, 64 or 128 (zeros), to keep the instantiations few.
  const int64_t dp = dm.d <= 16 ? 16 : dm.d <= 32 ? 32 : dm.d <= 64 ? 64 : dm.d <= 128 ? 128 : 0;
  switch (dp) {
#define KF_FLASH_CASE(n) \
  case n:                \
    return prepare ? PrepareFlash<n>() : LaunchFlash<n>(qkv, dst, dm, stream);
    KF_FLASH_CASE(16)
    KF_FLASH_CASE(32)
    KF_FLASH_CASE(64)
    KF_FLASH_CASE(128)
#undef KF_FLASH_CASE
    default:
      return 1;
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
  const Dims dm{0, 0, 0, 0, d, 0, 0};
  if (Attention(true, nullptr, Peers{}, dm, ctx->stream) != 0) return 1;
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
  const Dims dm{b, s, t, hl, d, hidden, rank};
  if (b * s * hl > 0 &&
      Attention(false, static_cast<const bf16*>(ctx->workspace.data), joined, dm, stream) != 0)
    return 1;
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
