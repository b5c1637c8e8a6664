// DDP bf16-compressed bucket all-reduce, fused: cast + two-shot (one-shot when small)
// through peer memory, with f32 accumulation of the bf16 values.
//
// The bucket is split into W chunks (rank c owns chunk c) and every chunk into G slices
// (CTA b's). CTA b of each rank:
//   0. casts slice b of every chunk of its f32 bucket to bf16 in its workspace;
//   A. handshakes with CTA b of every peer (all their slice-b copies are in place);
//   1. two-shot: sums slice b of its own chunk over the W copies in f32, divides by W, rounds
//      to bf16 once and stores that into every rank's gathered buffer (its own included);
//      one-shot: sums slice b of every chunk over the W copies and is done;
//   B. (two-shot) handshakes again: every owner's averages of slice b are in place;
//   2. widens the gathered slices b of every chunk into its bucket.
// Every rank ends with the same values: each average is computed once (two-shot) or in the
// same order everywhere (one-shot). The bf16 copies alternate between two buffers by call
// parity, so that a peer still reading this call's copy (one-shot has no end handshake) is
// never overwritten by the next call's cast.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 512;
constexpr int kVec = 8;                            // elements per 16-byte bf16 vector
constexpr int64_t kOneShotBytes = 512 * 1024;      // bf16 bytes a one-shot rank pulls at most

struct Args {
  float* grad;
  __nv_bfloat16* copy_peers[KF_MAX_RANKS];      // this call's bf16 copy (by parity), per rank
  __nv_bfloat16* gathered_peers[KF_MAX_RANKS];  // the averaged chunks, per rank
  uint32_t* pad_peers[KF_MAX_RANKS];
  int64_t n, chunk, slice;  // chunk and slice lengths, multiples of kVec
  int rank, world, oneshot;
};

__device__ __forceinline__ void Handshake(const Args& a, int phase, uint32_t e) {
  __syncthreads();
  if (threadIdx.x < a.world) {
    const int slot = (phase * gridDim.x + blockIdx.x) * KF_MAX_RANKS;
    __threadfence_system();
    kf_signal(a.pad_peers[threadIdx.x] + slot + a.rank, e);
    kf_wait(a.pad_peers[a.rank] + slot + threadIdx.x, e);
  }
  __syncthreads();
}

// Slice b of chunk c: [lo, hi).
__device__ __forceinline__ void SliceOf(const Args& a, int c, int64_t& lo, int64_t& hi) {
  const int64_t c0 = c * a.chunk, c1 = min(a.n, c0 + a.chunk);
  lo = min(c1, c0 + blockIdx.x * a.slice);
  hi = min(c1, lo + a.slice);
}

__device__ __forceinline__ uint4 Pack(const float* v) {
  uint4 out;
  uint32_t* w = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
    w[j] = *reinterpret_cast<const uint32_t*>(&h);
  }
  return out;
}

__device__ __forceinline__ void Unpack(uint4 in, float* v) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&in);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162*>(&w[j]);
    const float2 f = __bfloat1622float2(h);
    v[2 * j] = f.x;
    v[2 * j + 1] = f.y;
  }
}

// 0: f32 -> bf16 into this rank's copy.
__device__ void Cast(const Args& a, int64_t lo, int64_t hi) {
  __nv_bfloat16* mine = a.copy_peers[a.rank];
  const int64_t vec_hi = lo + (hi - lo) / kVec * kVec;
  for (int64_t i = lo + kVec * threadIdx.x; i < vec_hi; i += kVec * kThreads) {
    float v[kVec];
    const float4 x0 = *reinterpret_cast<const float4*>(a.grad + i);
    const float4 x1 = *reinterpret_cast<const float4*>(a.grad + i + 4);
    v[0] = x0.x, v[1] = x0.y, v[2] = x0.z, v[3] = x0.w;
    v[4] = x1.x, v[5] = x1.y, v[6] = x1.z, v[7] = x1.w;
    *reinterpret_cast<uint4*>(mine + i) = Pack(v);
  }
  for (int64_t i = vec_hi + threadIdx.x; i < hi; i += kThreads)
    mine[i] = __float2bfloat16_rn(a.grad[i]);
}

// The mean over ranks of the bf16 copies at [i, i + len), len <= kVec, summed in f32 in rank
// order (the same order on every rank).
__device__ __forceinline__ void Mean(const Args& a, int64_t i, int len, float* v) {
#pragma unroll
  for (int j = 0; j < kVec; ++j) v[j] = 0.0f;
  for (int p = 0; p < a.world; ++p) {
    float t[kVec] = {};
    if (len == kVec) {
      Unpack(*reinterpret_cast<const uint4*>(a.copy_peers[p] + i), t);
    } else {
      for (int j = 0; j < len; ++j) t[j] = __bfloat162float(a.copy_peers[p][i + j]);
    }
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[j] += t[j];
  }
  const float inv = 1.0f / static_cast<float>(a.world);  // exact: W is a power of two
#pragma unroll
  for (int j = 0; j < kVec; ++j) v[j] *= inv;
}

__global__ void __launch_bounds__(kThreads) AllReduce(Args a, uint32_t* epochs) {
  const uint32_t e = epochs[blockIdx.x] + 1;
  int64_t lo, hi;
  for (int c = 0; c < a.world; ++c) {
    SliceOf(a, c, lo, hi);
    Cast(a, lo, hi);
  }
  Handshake(a, 0, e);
  if (a.oneshot) {
    for (int c = 0; c < a.world; ++c) {
      SliceOf(a, c, lo, hi);
      for (int64_t i = lo + kVec * threadIdx.x; i < hi; i += kVec * kThreads) {
        const int len = static_cast<int>(min(static_cast<int64_t>(kVec), hi - i));
        float v[kVec];
        Mean(a, i, len, v);
        if (len == kVec) {
          *reinterpret_cast<float4*>(a.grad + i) = make_float4(v[0], v[1], v[2], v[3]);
          *reinterpret_cast<float4*>(a.grad + i + 4) = make_float4(v[4], v[5], v[6], v[7]);
        } else {
          for (int j = 0; j < len; ++j) a.grad[i + j] = v[j];
        }
      }
    }
  } else {
    SliceOf(a, a.rank, lo, hi);
    for (int64_t i = lo + kVec * threadIdx.x; i < hi; i += kVec * kThreads) {
      const int len = static_cast<int>(min(static_cast<int64_t>(kVec), hi - i));
      float v[kVec];
      Mean(a, i, len, v);
      if (len == kVec) {
        const uint4 packed = Pack(v);
        for (int p = 0; p < a.world; ++p)
          *reinterpret_cast<uint4*>(a.gathered_peers[p] + i) = packed;
      } else {
        for (int j = 0; j < len; ++j) {
          const __nv_bfloat16 h = __float2bfloat16_rn(v[j]);
          for (int p = 0; p < a.world; ++p) a.gathered_peers[p][i + j] = h;
        }
      }
    }
    Handshake(a, 1, e);
    const __nv_bfloat16* gathered = a.gathered_peers[a.rank];
    for (int c = 0; c < a.world; ++c) {
      SliceOf(a, c, lo, hi);
      const int64_t vec_hi = lo + (hi - lo) / kVec * kVec;
      for (int64_t i = lo + kVec * threadIdx.x; i < vec_hi; i += kVec * kThreads) {
        float v[kVec];
        Unpack(*reinterpret_cast<const uint4*>(gathered + i), v);
        *reinterpret_cast<float4*>(a.grad + i) = make_float4(v[0], v[1], v[2], v[3]);
        *reinterpret_cast<float4*>(a.grad + i + 4) = make_float4(v[4], v[5], v[6], v[7]);
      }
      for (int64_t i = vec_hi + threadIdx.x; i < hi; i += kThreads)
        a.grad[i] = __bfloat162float(gathered[i]);
    }
  }
  if (threadIdx.x == 0) epochs[blockIdx.x] = e;
}

struct State {
  uint32_t* epoch;  // epoch[b]: calls CTA b has made (host mirror: calls)
  uint32_t calls;
  int ctas;
};

size_t Align(size_t v) { return (v + 255) / 256 * 256; }

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  State* st = new State;
  // The same grid on every rank (CTA b pairs with CTA b of the peers); few CTAs when ranks
  // share a GPU, so that all ranks' CTAs are resident together.
  st->ctas = ctx->emulated ? 4 : ctx->gpu.sm_count;
  st->calls = 0;
  if (2ull * st->ctas * KF_MAX_RANKS * sizeof(uint32_t) > ctx->signal_pad.nbytes) return 1;
  if (cudaMalloc(&st->epoch, st->ctas * sizeof(uint32_t)) != cudaSuccess) return 1;
  if (cudaMemset(st->epoch, 0, st->ctas * sizeof(uint32_t)) != cudaSuccess) return 1;
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  kf_tensor& grad = *kf_input(ctx, "grad");
  const int w = ctx->world_size;
  if (w & (w - 1)) return 2;  // the f32 mean multiplies by 1/W, exact only for powers of two
  Args a;
  a.grad = static_cast<float*>(grad.data);
  a.n = grad.numel;
  a.rank = ctx->rank;
  a.world = w;
  // One-shot pulls (W-1) copies of the bucket; two-shot moves about 2 (W-1)/W of one, in two
  // rounds: one-shot wins while its pulls stay small.
  a.oneshot = a.n * 2 * (w - 1) <= kOneShotBytes;
  a.chunk = ((a.n + w - 1) / w + kVec - 1) / kVec * kVec;
  a.slice = ((a.chunk + st->ctas - 1) / st->ctas + kVec - 1) / kVec * kVec;
  const size_t copy = Align(static_cast<size_t>(a.n) * 2);
  if (3 * copy > ctx->workspace.nbytes) return 3;
  // Calls alternate the bf16 copy: the parity of this call, the same on every rank.
  const size_t parity = st->calls & 1;
  for (int r = 0; r < w; ++r) {
    char* ws = static_cast<char*>(ctx->workspace.peers[r]);
    a.copy_peers[r] = reinterpret_cast<__nv_bfloat16*>(ws + parity * copy);
    a.gathered_peers[r] = reinterpret_cast<__nv_bfloat16*>(ws + 2 * copy);
    a.pad_peers[r] = static_cast<uint32_t*>(ctx->signal_pad.peers[r]);
  }
  AllReduce<<<st->ctas, kThreads, 0, ctx->stream>>>(a, st->epoch);
  st->calls += 1;
  return cudaGetLastError() != cudaSuccess ? 4 : 0;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  cudaFree(st->epoch);
  delete st;
  return 0;
}
