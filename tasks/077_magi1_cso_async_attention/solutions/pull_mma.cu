// MAGI-1 CSO attention without all-to-alls (as pull_overlap.cu: each rank answers its own tokens
// for every head and pulls the other ranks' kv slices of each range on the copy engines, in the
// order the k_ranges need them, while the SMs attend to the ranges already pulled), with a
// register-resident flash-attention tile kernel instead of the baseline's wmma kernel:
// mma.sync m16n8k16 (bf16 operands, fp32 accumulation), each warp holding its 16 query rows'
// q fragments, scores, probabilities and output accumulators in registers (flash-attention 2's
// layout: the score accumulators become the P operand of the P*V product without leaving the
// registers), so shared memory carries only the q, k and v tiles and no score, probability or
// output tile makes a round trip through it.
//
// Ordering: the start barrier (slot [src] of each pad, epoch + 1 per call) orders the pulls
// after every peer entered this call, so its inputs hold this call's values. No end barrier is
// needed: only peers' inputs are read, the main stream waits for every pull before it ends, and
// the harness replaces inputs only after every rank's call has finished.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

using bf16 = __nv_bfloat16;

constexpr int kMaxWorld = 8;
constexpr int kMaxRanges = 64;
constexpr int kRows = 64;  // queries per block: 4 warps x 16
constexpr int kKeys = 64;  // keys per tile
constexpr int kWarps = 4;
constexpr int kMaxD = 128;

struct Dims {
  int64_t w, s, c, h, kvh, g, d;
};

__host__ __device__ constexpr int Ld(int dp) { return dp + 8; }  // bf16 tile row (16 B pad)

// q, k and v tiles of kRows x Ld(dp) bf16.
__host__ __device__ constexpr size_t SmemBytes(int dp) {
  return 3 * static_cast<size_t>(kRows) * Ld(dp) * sizeof(bf16);
}

// A kRows x dp tile whose row i (i < valid) starts at src + i * stride, zero-padded past d and
// past valid.
template <int DP>
__device__ void LoadTile(bf16* dst, const bf16* src, int64_t stride, int valid, int d) {
  constexpr int ld = Ld(DP);
  const bf16 zero = __float2bfloat16(0.0f);
  if (d % 8 == 0) {
    constexpr int vecs = DP / 8;
    for (int i = threadIdx.x; i < kRows * vecs; i += blockDim.x) {
      const int r = i / vecs, c = (i % vecs) * 8;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (r < valid && c < d) val = *reinterpret_cast<const uint4*>(src + r * stride + c);
      *reinterpret_cast<uint4*>(dst + r * ld + c) = val;
    }
  } else {
    for (int i = threadIdx.x; i < kRows * DP; i += blockDim.x) {
      const int r = i / DP, c = i % DP;
      dst[r * ld + c] = (r < valid && c < d) ? src[r * stride + c] : zero;
    }
  }
}

__device__ inline uint32_t Pack(bf16 lo, bf16 hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}

__device__ inline uint32_t Load32(const bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }

// c += a * b: a 16x16 (row-major), b 16x8 (column-major), c 16x8 fp32. Fragments (PTX ISA,
// m16n8k16 with .bf16): lane = 4 * grp + tig; a = {(grp, 2tig..), (grp+8, 2tig..), (grp, 2tig+8..),
// (grp+8, 2tig+8..)}, b = {(k 2tig.., n grp), (k 2tig+8.., n grp)}, c = {(grp, 2tig), (grp,
// 2tig+1), (grp+8, 2tig), (grp+8, 2tig+1)}; the lower column or k sits in the low 16 bits.
__device__ inline void Mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 bf16 matrices, transposed: lanes 8i .. 8i+7 give the row addresses of matrix i, and
// register i of lane 4 * grp + tig holds its elements (2tig, grp) and (2tig + 1, grp).
__device__ inline void LoadMatrixX4Trans(const bf16* row, uint32_t* r) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// One block: 64 of this rank's S queries of range `range`, head blockIdx.y, over the keys of
// its k_range. Keys come from the gathered sequence kv_all [R, W*S, KVH, 2D]: key x is token
// x % C of range x / C. A key tile never crosses a range: tiles restart at each range start.
template <int DP>
__global__ void __launch_bounds__(kWarps * 32)
    FlashRange(const bf16* __restrict__ q, bf16* __restrict__ out, const bf16* __restrict__ kv_all,
               int64_t start, int64_t end, int range, Dims dm, float scale_log2) {
  constexpr int ld = Ld(DP), kSteps = DP / 16, dTiles = DP / 8, nTiles = kKeys / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = qs + kRows * ld;
  bf16* vs = ks + kRows * ld;

  const int d = static_cast<int>(dm.d);
  const int64_t q0 = blockIdx.x * static_cast<int64_t>(kRows), h = blockIdx.y, kh = h / dm.g;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, grp = lane / 4, tig = lane % 4;
  const int qvalid = static_cast<int>(min(static_cast<int64_t>(kRows), dm.s - q0));
  const int64_t key_stride = dm.kvh * 2 * dm.d;

  LoadTile<DP>(qs, q + ((range * dm.s + q0) * dm.h + h) * dm.d, dm.h * dm.d, qvalid, d);
  __syncthreads();
  uint32_t qa[kSteps][4];
  const bf16* qrow = qs + (warp * 16 + grp) * ld + 2 * tig;
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    qa[kk][0] = Load32(qrow + kk * 16);
    qa[kk][1] = Load32(qrow + 8 * ld + kk * 16);
    qa[kk][2] = Load32(qrow + kk * 16 + 8);
    qa[kk][3] = Load32(qrow + 8 * ld + kk * 16 + 8);
  }
  float o[dTiles][4];
#pragma unroll
  for (int t = 0; t < dTiles; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows grp and grp + 8

  for (int64_t k0 = start; k0 < end;) {
    const int64_t seg_end = min(end, (k0 / dm.c + 1) * dm.c);  // the end of k0's range
    const int kvalid = static_cast<int>(min(static_cast<int64_t>(kKeys), seg_end - k0));
    const bf16* base = kv_all + ((k0 / dm.c) * dm.w * dm.s + k0 % dm.c) * key_stride + kh * 2 * dm.d;
    k0 += kvalid;
    __syncthreads();  // the previous tile's k and v are no longer read
    LoadTile<DP>(ks, base, key_stride, kvalid, d);
    LoadTile<DP>(vs, base + dm.d, key_stride, kvalid, d);
    __syncthreads();

    // Scores s[n] of rows (grp, grp + 8) against keys 8n + 2tig, 8n + 2tig + 1.
    float s[nTiles][4];
#pragma unroll
    for (int n = 0; n < nTiles; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
      const bf16* krow = ks + (n * 8 + grp) * ld + 2 * tig;
#pragma unroll
      for (int kk = 0; kk < kSteps; ++kk)
        Mma(s[n], qa[kk], Load32(krow + kk * 16), Load32(krow + kk * 16 + 8));
    }
    // Online softmax in base 2: x = score * scale * log2(e).
    float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < nTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = n * 8 + 2 * tig + (e & 1);
        s[n][e] = key < kvalid ? s[n][e] * scale_log2 : -INFINITY;
        tmax[e >> 1] = fmaxf(tmax[e >> 1], s[n][e]);
      }
    float alpha[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      tmax[i] = fmaxf(tmax[i], __shfl_xor_sync(0xffffffffu, tmax[i], 1));
      tmax[i] = fmaxf(tmax[i], __shfl_xor_sync(0xffffffffu, tmax[i], 2));
      const float m_new = fmaxf(m[i], tmax[i]);  // finite: key 0 of every tile is valid
      alpha[i] = exp2f(m[i] - m_new);            // 0 while m is -inf
      m[i] = m_new;
      l[i] *= alpha[i];
    }
#pragma unroll
    for (int t = 0; t < dTiles; ++t) {
      o[t][0] *= alpha[0];
      o[t][1] *= alpha[0];
      o[t][2] *= alpha[1];
      o[t][3] *= alpha[1];
    }
    // P in bf16 (the rounded values are also what l sums), as the a operand of P * V.
    uint32_t pa[kKeys / 16][4];
#pragma unroll
    for (int n = 0; n < nTiles; ++n) {
      bf16 p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        p[e] = __float2bfloat16(exp2f(s[n][e] - m[e >> 1]));  // 0 past the range
        l[e >> 1] += __bfloat162float(p[e]);
      }
      pa[n / 2][(n % 2) * 2 + 0] = Pack(p[0], p[1]);  // row grp
      pa[n / 2][(n % 2) * 2 + 1] = Pack(p[2], p[3]);  // row grp + 8
    }
    // o += P * V: b = V[key 16kk + 2tig (+1; +8, +9)][dim 8t + grp], two dim tiles per
    // ldmatrix: matrices (keys 16kk.., dims 8t..), (16kk+8.., 8t..), (16kk.., 8t+8..),
    // (16kk+8.., 8t+8..).
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const bf16* vrow = vs + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * ld + (lane >> 4) * 8;
#pragma unroll
      for (int t = 0; t < dTiles; t += 2) {
        uint32_t b[4];
        LoadMatrixX4Trans(vrow + t * 8, b);
        Mma(o[t], pa[kk], b[0], b[1]);
        Mma(o[t + 1], pa[kk], b[2], b[3]);
      }
    }
  }

  // Row sums are spread over the 4 lanes of a row group.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = warp * 16 + grp + 8 * i;
    if (row >= qvalid) continue;
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    bf16* dst = out + ((range * dm.s + q0 + row) * dm.h + h) * dm.d;
#pragma unroll
    for (int t = 0; t < dTiles; ++t)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = t * 8 + 2 * tig + e;
        if (col < d) dst[col] = __float2bfloat16(o[t][2 * i + e] * inv);
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

using Kernel = void (*)(const bf16*, bf16*, const bf16*, int64_t, int64_t, int, Dims, float);

Kernel KernelFor(int dp) {
  switch (dp) {
    case 16: return FlashRange<16>;
    case 32: return FlashRange<32>;
    case 48: return FlashRange<48>;
    case 64: return FlashRange<64>;
    case 80: return FlashRange<80>;
    case 96: return FlashRange<96>;
    case 112: return FlashRange<112>;
    case 128: return FlashRange<128>;
    default: return nullptr;
  }
}

struct Ctx {
  Kernel kernel = nullptr;
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr;
  cudaEvent_t ready[kMaxRanges] = {};  // every range attention m needs has been pulled
  int64_t* host_ranges = nullptr;      // pinned
  uint32_t epoch = 0;
  size_t smem = 0;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const kf_tensor* q = kf_input(ctx, "q");
  if (q == nullptr || q->ndim != 4 || q->shape[3] < 1 || q->shape[3] > kMaxD ||
      q->shape[0] > kMaxRanges)
    return 1;
  if (ctx->world_size > kMaxWorld || ctx->signal_pad.nbytes < kMaxWorld * sizeof(uint32_t))
    return 1;
  Ctx* c = new Ctx;
  ctx->user = c;
  const int dp = static_cast<int>((q->shape[3] + 15) / 16 * 16);
  c->kernel = KernelFor(dp);
  c->smem = SmemBytes(dp);
  if (c->kernel == nullptr || c->smem > ctx->gpu.smem_per_block_optin) return 1;
  if (cudaFuncSetAttribute(c->kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(c->smem)) != cudaSuccess)
    return 1;
  if (cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking) != cudaSuccess) return 1;
  if (cudaEventCreateWithFlags(&c->fork, cudaEventDisableTiming) != cudaSuccess) return 1;
  for (int i = 0; i < kMaxRanges; ++i)
    if (cudaEventCreateWithFlags(&c->ready[i], cudaEventDisableTiming) != cudaSuccess) return 1;
  if (cudaMallocHost(&c->host_ranges, 2 * kMaxRanges * sizeof(int64_t)) != cudaSuccess) return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  Ctx* c = static_cast<Ctx*>(ctx->user);
  const kf_tensor *q = kf_input(ctx, "q"), *kv = kf_input(ctx, "kv");
  const kf_tensor* ranges = kf_input(ctx, "k_ranges");
  kf_tensor* out = kf_output(ctx, "out");
  if (c == nullptr || q == nullptr || kv == nullptr || ranges == nullptr || out == nullptr ||
      q->dtype != KF_BF16 || q->ndim != 4 || kv->ndim != 4)
    return 2;
  const int world = ctx->world_size, rank = ctx->rank;
  const int64_t r = q->shape[0], s = q->shape[1], h = q->shape[2], d = q->shape[3];
  const int64_t kvh = kv->shape[2], cl = static_cast<int64_t>(kf_param(ctx, "C", 0));
  if (r > kMaxRanges || d > kMaxD || kvh < 1 || h % kvh != 0 || cl < 1 || cl > world * s)
    return 2;
  if (r == 0 || s == 0) return 0;
  Dims dm{world, s, cl, h, kvh, h / kvh, d};

  // Workspace: the gathered kv [R, W*S, KVH, 2D].
  const size_t slice = static_cast<size_t>(s * kvh * 2 * d);  // one rank's slice of a range
  if (ctx->workspace.nbytes < static_cast<size_t>(r * world) * slice * sizeof(bf16)) return 1;
  bf16* kv_all = static_cast<bf16*>(ctx->workspace.data);
  auto slot = [&](int64_t range, int p) { return kv_all + (range * world + p) * slice; };

  // The ranges decide which pulls each attention waits for.
  if (cudaMemcpyAsync(c->host_ranges, ranges->data, static_cast<size_t>(2 * r) * sizeof(int64_t),
                      cudaMemcpyDeviceToHost, ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess)
    return 1;
  for (int64_t i = 0; i < r; ++i) {
    const int64_t a = c->host_ranges[2 * i], b = c->host_ranges[2 * i + 1];
    if (a < 0 || b <= a || b > r * cl) return 2;
  }

  // Side stream: barrier, then the ranges in the order the attentions need them.
  const uint32_t epoch = ++c->epoch;
  Pads pads = {};
  for (int p = 0; p < world; ++p) pads.p[p] = static_cast<uint32_t*>(ctx->signal_pad.peers[p]);
  if (cudaEventRecord(c->fork, ctx->stream) != cudaSuccess) return 1;
  if (cudaStreamWaitEvent(c->side, c->fork, 0) != cudaSuccess) return 1;
  StartBarrier<<<1, 32, 0, c->side>>>(pads, rank, world, epoch);
  if (cudaGetLastError() != cudaSuccess) return 1;
  bool pulled[kMaxRanges] = {};
  for (int64_t i = 0; i < r; ++i) {
    const int64_t first = c->host_ranges[2 * i] / cl, last = (c->host_ranges[2 * i + 1] - 1) / cl;
    for (int64_t j = first; j <= last; ++j) {
      if (pulled[j]) continue;
      pulled[j] = true;
      for (int k = 0; k < world; ++k) {
        const int p = (rank + k) % world;  // own slice first, then the peers in turn
        const bf16* src = static_cast<const bf16*>(kv->peers[p]) + j * slice;
        if (cudaMemcpyAsync(slot(j, p), src, slice * sizeof(bf16), cudaMemcpyDeviceToDevice,
                            c->side) != cudaSuccess)
          return 1;
      }
    }
    if (cudaEventRecord(c->ready[i], c->side) != cudaSuccess) return 1;
  }

  // Main stream: each range once its keys are here.
  const dim3 grid(static_cast<unsigned>((s + kRows - 1) / kRows), static_cast<unsigned>(h));
  const float scale_log2 = 1.4426950408889634f / sqrtf(static_cast<float>(d));
  for (int64_t i = 0; i < r; ++i) {
    if (cudaStreamWaitEvent(ctx->stream, c->ready[i], 0) != cudaSuccess) return 1;
    c->kernel<<<grid, kWarps * 32, c->smem, ctx->stream>>>(
        static_cast<const bf16*>(q->data), static_cast<bf16*>(out->data), kv_all,
        c->host_ranges[2 * i], c->host_ranges[2 * i + 1], static_cast<int>(i), dm, scale_log2);
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
  for (cudaEvent_t e : c->ready)
    if (e != nullptr) cudaEventDestroy(e);
  if (c->host_ranges != nullptr) cudaFreeHost(c->host_ranges);
  delete c;
  ctx->user = nullptr;
  return rc;
}
