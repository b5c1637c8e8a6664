// MAGI-1 CSO attention without all-to-alls: every rank keeps its own queries (all H heads of its
// slice of every range) and pulls the other ranks' kv slices of each range straight from their
// inputs (peer-to-peer cudaMemcpyAsync on the copy engines, on a side stream) into a gathered
// copy of the whole clipped sequence, range by range in the order the attention needs them,
// while its SMs attend to the ranges already there:
//
//   side stream:  start barrier | pull range 0 | pull range 1 | ... | pull range R-1
//   main stream:  (wait 0) attend range 0 | (wait 1) attend range 1 | ...
//
// Against the baseline (kv all-to-all, then R + 2 q/out all-to-alls, each followed by its
// attention on one stream): queries and outputs never move (a rank answers its own tokens for
// every head, the same flops as answering every token for H/W heads), no pack or unpack passes,
// and the kv traffic runs under the compute. Range m waits only for the ranges its k_range
// touches (k_ranges are read to the host once per call: they decide the pull order).
//
// Ordering: the start barrier (slot [src] of each pad, epoch + 1 per call) orders the pulls
// after every peer entered this call, so its inputs hold this call's values. No end barrier is
// needed: only peers' inputs are read, the main stream waits for every pull before it ends, and
// the harness replaces inputs only after every rank's call has finished.
#include <cuda_bf16.h>
#include <mma.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int kMaxWorld = 8;
constexpr int kMaxRanges = 64;
constexpr int kRows = 64;  // queries per block: 4 warps x 16
constexpr int kKeys = 64;  // keys per tile
constexpr int kWarps = 4;
constexpr int kMaxD = 128;
constexpr int kLdS = kKeys + 4;  // fp32 scores
constexpr int kLdP = kKeys + 8;  // bf16 probabilities

struct Dims {
  int64_t w, s, c, h, kvh, g, d;
  int dp;  // d rounded up to 16
};

__host__ __device__ inline int LdH(int dp) { return dp + 8; }  // bf16 q/k/v tiles
__host__ __device__ inline int LdO(int dp) { return dp + 4; }  // fp32 out tile
__host__ __device__ inline size_t Align256(size_t x) { return (x + 255) / 256 * 256; }

// Shared memory: q, k, v tiles (bf16), scores (fp32), probabilities (bf16), out (fp32).
struct Smem {
  size_t q, k, v, s, p, o, total;
  __host__ __device__ explicit Smem(int dp) {
    const size_t tile = static_cast<size_t>(kRows) * LdH(dp) * sizeof(bf16);
    q = 0;
    k = q + Align256(tile);
    v = k + Align256(tile);
    s = v + Align256(tile);
    p = s + Align256(static_cast<size_t>(kRows) * kLdS * sizeof(float));
    o = p + Align256(static_cast<size_t>(kRows) * kLdP * sizeof(bf16));
    total = o + Align256(static_cast<size_t>(kRows) * LdO(dp) * sizeof(float));
  }
};

// A kRows x dp tile whose row i (i < valid) starts at src + i * stride, zero-padded past d and
// past valid.
__device__ void LoadTile(bf16* dst, int ld, const bf16* src, int64_t stride, int valid, int d,
                         int dp) {
  const bf16 zero = __float2bfloat16(0.0f);
  if (d % 8 == 0) {
    const int vecs = dp / 8;
    for (int i = threadIdx.x; i < kRows * vecs; i += blockDim.x) {
      const int r = i / vecs, c = (i % vecs) * 8;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (r < valid && c < d) val = *reinterpret_cast<const uint4*>(src + r * stride + c);
      *reinterpret_cast<uint4*>(dst + r * ld + c) = val;
    }
  } else {
    for (int i = threadIdx.x; i < kRows * dp; i += blockDim.x) {
      const int r = i / dp, c = i % dp;
      dst[r * ld + c] = (r < valid && c < d) ? src[r * stride + c] : zero;
    }
  }
}

// One block: 64 of this rank's S queries of range `range`, head blockIdx.y, over the keys of
// its k_range. Keys come from the gathered sequence kv_all [R, W*S, KVH, 2D]: key x is token
// x % C of range x / C. A key tile never crosses a range: tiles restart at each range start.
__global__ void __launch_bounds__(kWarps * 32)
    FlashRange(const bf16* __restrict__ q, bf16* __restrict__ out, const bf16* __restrict__ kv_all,
               int64_t start, int64_t end, int range, Dims dm, float scale) {
  extern __shared__ __align__(256) unsigned char smem[];
  const int dp = dm.dp, ldh = LdH(dp), ldo = LdO(dp), d = static_cast<int>(dm.d);
  const Smem lay(dp);
  bf16* qs = reinterpret_cast<bf16*>(smem + lay.q);
  bf16* ks = reinterpret_cast<bf16*>(smem + lay.k);
  bf16* vs = reinterpret_cast<bf16*>(smem + lay.v);
  float* ss = reinterpret_cast<float*>(smem + lay.s);
  bf16* ps = reinterpret_cast<bf16*>(smem + lay.p);
  float* os = reinterpret_cast<float*>(smem + lay.o);

  const int64_t q0 = blockIdx.x * static_cast<int64_t>(kRows), h = blockIdx.y, kh = h / dm.g;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = lane / 2, half = lane % 2;  // this lane's query row (of the warp's 16)
  const int qvalid = static_cast<int>(min(static_cast<int64_t>(kRows), dm.s - q0));
  const int64_t key_stride = dm.kvh * 2 * dm.d;

  LoadTile(qs, ldh, q + ((range * dm.s + q0) * dm.h + h) * dm.d, dm.h * dm.d, qvalid, d, dp);
  for (int i = threadIdx.x; i < kRows * ldo; i += blockDim.x) os[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  for (int64_t k0 = start; k0 < end;) {
    const int64_t seg_end = min(end, (k0 / dm.c + 1) * dm.c);  // the end of k0's range
    const int kvalid = static_cast<int>(min(static_cast<int64_t>(kKeys), seg_end - k0));
    const bf16* base = kv_all + ((k0 / dm.c) * dm.w * dm.s + k0 % dm.c) * key_stride + kh * 2 * dm.d;
    k0 += kvalid;
    __syncthreads();  // the previous tile's k, v and p are no longer read
    LoadTile(ks, ldh, base, key_stride, kvalid, d, dp);
    LoadTile(vs, ldh, base + dm.d, key_stride, kvalid, d, dp);
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
      const bf16 pb = __float2bfloat16(__expf(srow[jj] - m_new));
      prow[jj] = pb;
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

  const int64_t qi = q0 + warp * 16 + row;
  if (qi < dm.s) {
    const float* orow = os + (warp * 16 + row) * ldo;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    bf16* dst = out + ((range * dm.s + qi) * dm.h + h) * dm.d;
    for (int c = half; c < d; c += 2) dst[c] = __float2bfloat16(orow[c] * inv);
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
  c->smem = Smem(static_cast<int>((q->shape[3] + 15) / 16 * 16)).total;
  if (c->smem > ctx->gpu.smem_per_block_optin) return 1;
  if (cudaFuncSetAttribute(FlashRange, cudaFuncAttributeMaxDynamicSharedMemorySize,
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
  Dims dm{world, s, cl, h, kvh, h / kvh, d, static_cast<int>((d + 15) / 16 * 16)};

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
  const float scale = 1.0f / sqrtf(static_cast<float>(d));
  for (int64_t i = 0; i < r; ++i) {
    if (cudaStreamWaitEvent(ctx->stream, c->ready[i], 0) != cudaSuccess) return 1;
    FlashRange<<<grid, kWarps * 32, c->smem, ctx->stream>>>(
        static_cast<const bf16*>(q->data), static_cast<bf16*>(out->data), kv_all,
        c->host_ranges[2 * i], c->host_ranges[2 * i + 1], static_cast<int>(i), dm, scale);
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
