// Gradient of the top-k / top-p log-probabilities without moving logits or
// gradients: only each token's top-k candidates cross the links (~200 bytes
// per token and rank) and 16 bytes of statistics come back, where the baseline
// all-to-alls (W-1)/W of every logit one way and of every f32 gradient the
// other. The chunks of the task only shape the baseline; this ignores them.
//
// One kernel, three phases, the same grid on every rank; token n belongs to
// block n % G everywhere, and its owner is rank (n / G) % W.
//   1. Block b reads each of its tokens' logit shard once and keeps a running
//      candidate buffer in shared memory: values above a threshold thr are
//      appended, values equal to it only counted; when the buffer fills, a
//      radix select over it finds its k_r-th largest value, the new threshold
//      (k_r = min(k', VL)). At the end of the row, tau_r (the shard's k_r-th
//      largest value), the values above it (fewer than k_r) and the count equal
//      to it form the token's record in this rank's workspace, with the
//      target's logit if the shard holds it.
//   2. Handshake of block b with block b of every peer. The owner merges the W
//      records of a token (a warp per token): every logit >= tau is in them
//      (tau >= tau_r for every r), so tau, the top-p test (fp64) and the
//      normaliser are exact; it writes (theta, m, log of the normaliser).
//   3. Handshake again; block b reads its tokens' statistics from their owners
//      and writes the gradient of its own shard of each row (the logits read a
//      second time): g * ([v == t] - exp(z - m - log_z)) where z >= theta or v
//      is the target, 0 elsewhere.
// Records and statistics are single-buffered: a rank rewrites them in call
// n+1 only after every peer has passed call n's second handshake, which a peer
// does after its last read of them.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxTopK = 64;   // this solution's limit on top_k (the task's is 50)
constexpr int kMaxWorld = 8;
constexpr int kTile = 2048;    // elements per block step: 8 per thread
constexpr int kCap = 4096;     // candidate buffer; compacted once it holds kCap - kTile
constexpr int kHeader = 4;     // record: n_gt, n_eq, tau, target logit (NaN: not here)
constexpr int kMaxEntries = kMaxWorld * kMaxTopK;

__device__ __forceinline__ float ToF(float v) { return v; }
__device__ __forceinline__ float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }

template <int kKeyBits>
__device__ __forceinline__ uint32_t KeyOf(float x) {
  uint32_t u = __float_as_uint(x);
  if (u == 0x80000000u) u = 0;  // -0 is +0
  const uint32_t k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return k >> (32 - kKeyBits);
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float WarpMin(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ double WarpSum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ uint32_t WarpSumU(uint32_t v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

struct Phase1 {
  float buf[kCap];
  float keep[kMaxTopK];
  uint32_t hist[256];
};
struct WarpMerge {
  float v[kMaxEntries];       // entries 0..W-1: the ranks' tau groups; then single values
  uint32_t cnt[kMaxWorld];    // the tau groups' counts (0: below every tau, ignored)
  float dv[kMaxTopK];         // the values above tau
  double dq[kMaxTopK];        // their exp(v - m)
};
struct Smem {
  union {
    Phase1 p1;
    WarpMerge w[kWarps];
  };
  uint32_t n, count_eq, has, digit, rank, n_keep, eq_keep;
  float thr, thr_keep;
  uint32_t epoch;
};

struct Args {
  const void* logits;        // this rank's [tokens, vl]
  const int64_t* target;     // [tokens]
  const float* grad_output;  // [tokens]
  float* out;                // this rank's [tokens, vl]
  uint32_t* ws[KF_MAX_RANKS];  // peers' workspaces
  uint32_t* pad[KF_MAX_RANKS];
  uint32_t* epochs;
  int64_t tokens, vl;
  int rank, world, k, kr;    // k = min(top_k, V), kr = min(k, vl)
  int64_t stride;            // record stride in words
  double top_p;
};

__device__ __forceinline__ void Barrier(const Args& a, Smem& sh, uint32_t e) {
  __syncthreads();
  const int peer = threadIdx.x;
  if (peer < a.world && peer != a.rank) {
    kf_signal(a.pad[peer] + blockIdx.x * a.world + a.rank, e);
    kf_wait(a.pad[a.rank] + blockIdx.x * a.world + peer, e);
  }
  __syncthreads();
}

// Radix select over sh.p1.buf[0..n): the key of the kr-th largest value.
template <int kKeyBits>
__device__ uint32_t SelectKey(Smem& sh, uint32_t n, int kr) {
  const int lane = threadIdx.x & 31;
  uint32_t prefix = 0, mask = 0;
  if (threadIdx.x == 0) sh.rank = static_cast<uint32_t>(kr);
  for (int shift = kKeyBits - 8; shift >= 0; shift -= 8) {
    sh.p1.hist[threadIdx.x] = 0;  // kThreads == 256 bins
    __syncthreads();
    for (uint32_t i0 = 0; i0 < n; i0 += kThreads) {
      const uint32_t i = i0 + threadIdx.x;
      uint32_t bin = 256;
      if (i < n) {
        const uint32_t key = KeyOf<kKeyBits>(sh.p1.buf[i]);
        if ((key & mask) == prefix) bin = (key >> shift) & 255u;
      }
      const uint32_t peers = __match_any_sync(0xffffffffu, bin);
      if (bin < 256 && lane == __ffs(peers) - 1) atomicAdd(&sh.p1.hist[bin], __popc(peers));
    }
    __syncthreads();
    if (threadIdx.x < 32) {  // lane l scans bins 255-8l .. 248-8l, largest first
      uint32_t s = 0;
      for (int j = 0; j < 8; ++j) s += sh.p1.hist[255 - 8 * lane - j];
      uint32_t incl = s;
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += t;
      }
      const uint32_t want = sh.rank;
      const uint32_t ball = __ballot_sync(0xffffffffu, incl >= want);
      if (lane == __ffs(ball) - 1) {
        uint32_t above = incl - s;
        for (int j = 0; j < 8; ++j) {
          const uint32_t b = 255 - 8 * lane - j;
          if (above + sh.p1.hist[b] >= want || j == 7) {
            sh.digit = b;
            sh.rank = want - above;
            break;
          }
          above += sh.p1.hist[b];
        }
      }
    }
    __syncthreads();
    prefix |= sh.digit << shift;
    mask |= 255u << shift;
  }
  return prefix;
}

// Replaces the buffer by its values above its kr-th largest, which becomes the
// threshold, with the count of values equal to it. Needs n >= kr.
template <int kKeyBits>
__device__ void Compact(Smem& sh, int kr) {
  const uint32_t n = sh.n;
  const uint32_t key = SelectKey<kKeyBits>(sh, n, kr);
  if (threadIdx.x == 0) sh.n_keep = sh.eq_keep = 0;
  __syncthreads();
  uint32_t eq = 0;
  for (uint32_t i = threadIdx.x; i < n; i += kThreads) {
    const float x = sh.p1.buf[i];
    const uint32_t kx = KeyOf<kKeyBits>(x);
    if (kx > key) {
      sh.p1.keep[atomicAdd(&sh.n_keep, 1u)] = x;  // fewer than kr
    } else if (kx == key) {
      ++eq;
      sh.thr_keep = x;
    }
  }
  if (eq != 0) atomicAdd(&sh.eq_keep, eq);
  __syncthreads();
  const uint32_t m = sh.n_keep;
  for (uint32_t i = threadIdx.x; i < m; i += kThreads) sh.p1.buf[i] = sh.p1.keep[i];
  if (threadIdx.x == 0) {
    // The new threshold is above every value the old one counted: its group goes.
    sh.n = m;
    sh.thr = sh.thr_keep;
    sh.count_eq = sh.eq_keep;
    sh.has = 1;
  }
  __syncthreads();
}

// Phase 1 for one token row of this rank's shard: writes the token's record.
template <typename T, int kKeyBits>
__device__ void LocalCandidates(const Args& a, Smem& sh, int64_t n_tok) {
  const int lane = threadIdx.x & 31;
  const T* row = static_cast<const T*>(a.logits) + n_tok * a.vl;
  if (threadIdx.x == 0) {
    sh.n = 0;
    sh.count_eq = 0;
    sh.has = 0;
    sh.thr = -INFINITY;
  }
  __syncthreads();
  uint32_t eq = 0;  // this thread's values equal to the current threshold, not yet counted
  for (int64_t base = 0; base < a.vl; base += kTile) {
    const float thr = sh.thr;
    const bool has = sh.has != 0;
    float x[kTile / kThreads];
#pragma unroll
    for (int j = 0; j < kTile / kThreads; ++j) {
      const int64_t c = base + j * kThreads + threadIdx.x;
      x[j] = c < a.vl ? ToF(row[c]) : -INFINITY;
    }
#pragma unroll
    for (int j = 0; j < kTile / kThreads; ++j) {
      const int64_t c = base + j * kThreads + threadIdx.x;
      const bool valid = c < a.vl;
      const bool app = valid && (!has || x[j] > thr);
      if (has && valid && x[j] == thr) ++eq;
      const uint32_t ball = __ballot_sync(0xffffffffu, app);
      if (ball != 0) {
        uint32_t at = 0;
        if (lane == 0) at = atomicAdd(&sh.n, __popc(ball));
        at = __shfl_sync(0xffffffffu, at, 0);
        if (app) sh.p1.buf[at + __popc(ball & ((1u << lane) - 1))] = x[j];
      }
    }
    __syncthreads();
    const bool last = base + kTile >= a.vl;
    const bool full = sh.n >= static_cast<uint32_t>(kCap - kTile);
    __syncthreads();  // every thread has read sh.n before the next step appends
    if (full || last) {
      // Count the values equal to the threshold before it moves.
      if (eq != 0) atomicAdd(&sh.count_eq, eq);
      eq = 0;
      __syncthreads();
      if (sh.n >= static_cast<uint32_t>(a.kr)) Compact<kKeyBits>(sh, a.kr);
      // else (last step only): the threshold group completes the kr largest.
    }
  }
  // Record: header, then the values above tau.
  uint32_t* rec = a.ws[a.rank] + n_tok * a.stride;
  const uint32_t n_gt = sh.n;
  for (uint32_t i = threadIdx.x; i < n_gt; i += kThreads)
    rec[kHeader + i] = __float_as_uint(sh.p1.buf[i]);
  if (threadIdx.x == 0) {
    const int64_t t = a.target[n_tok] - static_cast<int64_t>(a.rank) * a.vl;
    rec[0] = n_gt;
    rec[1] = sh.count_eq;
    rec[2] = __float_as_uint(sh.thr);
    rec[3] = t >= 0 && t < a.vl ? __float_as_uint(ToF(row[t])) : 0x7fc00000u;
  }
  __syncthreads();  // sh is reused by the next row
}

// Phase 2 for one token, by one warp: (theta, m, log_z) from the W records.
__device__ float4 MergeToken(const Args& a, WarpMerge& w, int64_t n_tok) {
  const int lane = threadIdx.x & 31;
  uint32_t ngt = 0, neq = 0;
  float tau = -INFINITY, zt = -INFINITY;
  if (lane < a.world) {
    const uint32_t* rec = a.ws[lane] + n_tok * a.stride;
    const uint4 h = __ldcg(reinterpret_cast<const uint4*>(rec));
    ngt = h.x;
    neq = h.y;
    tau = __uint_as_float(h.z);
    const float z = __uint_as_float(h.w);
    if (!isnan(z)) zt = z;
  }
  // With k_r = k, every shard holds k values >= tau_r, so tau >= max tau_r = t0
  // and the values below t0 cannot matter. With k_r = VL < k the records hold
  // whole shards, and all of them count.
  const float t0 = a.kr == a.k ? WarpMax(tau) : -INFINITY;
  zt = WarpMax(zt);
  if (lane < a.world) {
    w.v[lane] = tau;
    w.cnt[lane] = tau >= t0 ? neq : 0;
  }
  uint32_t e = a.world;
  for (int r = 0; r < a.world; ++r) {
    const uint32_t nr = __shfl_sync(0xffffffffu, ngt, r);
    const uint32_t* vals = a.ws[r] + n_tok * a.stride + kHeader;
    for (uint32_t i0 = 0; i0 < nr; i0 += 32) {
      const uint32_t i = i0 + lane;
      const float x = i < nr ? __uint_as_float(__ldcg(vals + i)) : -INFINITY;
      const bool keep = i < nr && x >= t0;
      const uint32_t ball = __ballot_sync(0xffffffffu, keep);
      if (keep) w.v[e + __popc(ball & ((1u << lane) - 1))] = x;
      e += __popc(ball);
    }
  }
  __syncwarp();
  const uint32_t world = a.world;
  // tau = the largest entry value with at least k values >= it.
  float tau_g = -INFINITY, m = -INFINITY;
  for (uint32_t i = lane; i < e; i += 32) {
    const float v = w.v[i];
    if (i < world && w.cnt[i] == 0) continue;
    m = fmaxf(m, v);
    uint32_t ge = 0;
    for (uint32_t j = 0; j < e; ++j) ge += w.v[j] >= v ? (j < world ? w.cnt[j] : 1u) : 0u;
    if (ge >= static_cast<uint32_t>(a.k)) tau_g = fmaxf(tau_g, v);
  }
  tau_g = WarpMax(tau_g);
  m = WarpMax(m);
  // tau's group and the entries above it (fewer than k values in all; a rank's
  // tau group is above tau only when k_r < k).
  uint32_t c_tau = 0;
  uint32_t nd = 0;
  for (uint32_t i0 = 0; i0 < e; i0 += 32) {
    const uint32_t i = i0 + lane;
    const float v = i < e ? w.v[i] : -INFINITY;
    const uint32_t c = i < e ? (i < world ? w.cnt[i] : 1u) : 0u;
    if (v == tau_g) c_tau += c;
    const bool above = i < e && v > tau_g;
    const uint32_t ball = __ballot_sync(0xffffffffu, above);
    if (above) {
      const uint32_t at = nd + __popc(ball & ((1u << lane) - 1));
      w.dv[at] = v;
      w.dq[at] = static_cast<double>(c) * exp(static_cast<double>(v) - m);
    }
    nd += __popc(ball);
  }
  c_tau = WarpSumU(c_tau);
  __syncwarp();
  const double q_tau = static_cast<double>(c_tau) * exp(static_cast<double>(tau_g) - m);
  double zk = 0;
  for (uint32_t i = lane; i < nd; i += 32) zk += w.dq[i];
  zk = WarpSum(zk) + q_tau;
  const double limit = a.top_p * zk;
  float theta = INFINITY;
  double zs = 0;
  for (uint32_t i = lane; i <= nd; i += 32) {
    const float v = i < nd ? w.dv[i] : tau_g;
    double above = 0;
    for (uint32_t j = 0; j < nd; ++j) above += w.dv[j] > v ? w.dq[j] : 0.0;
    if (above < limit) {
      theta = fminf(theta, v);
      zs += i < nd ? w.dq[i] : q_tau;
    }
  }
  theta = WarpMin(theta);
  zs = WarpSum(zs);
  if (zt < theta) zs += exp(static_cast<double>(zt) - m);
  __syncwarp();  // w is reused by the warp's next token
  return make_float4(theta, m, static_cast<float>(log(zs)), 0.f);
}

template <typename T, int kKeyBits>
__global__ void __launch_bounds__(kThreads) LogProbTopKGrad(Args a) {
  __shared__ Smem sh;
  if (threadIdx.x == 0) sh.epoch = a.epochs[blockIdx.x];
  __syncthreads();
  const uint32_t e0 = sh.epoch;
  const int64_t g = gridDim.x;
  for (int64_t n = blockIdx.x; n < a.tokens; n += g) LocalCandidates<T, kKeyBits>(a, sh, n);
  Barrier(a, sh, e0 + 1);
  // Owned tokens of this block: n = b + j*G with j % W == rank; a warp each.
  const int warp = threadIdx.x >> 5;
  float4* stats = reinterpret_cast<float4*>(a.ws[a.rank] + a.tokens * a.stride);
  int idx = 0;
  for (int64_t j = a.rank; blockIdx.x + j * g < a.tokens; j += a.world, ++idx) {
    if (idx % kWarps != warp) continue;
    const int64_t n = blockIdx.x + j * g;
    const float4 st = MergeToken(a, sh.w[warp], n);
    if ((threadIdx.x & 31) == 0) stats[n] = st;
  }
  Barrier(a, sh, e0 + 2);
  const T* logits = static_cast<const T*>(a.logits);
  for (int64_t j = 0; blockIdx.x + j * g < a.tokens; ++j) {
    const int64_t n = blockIdx.x + j * g;
    const int owner = static_cast<int>(j % a.world);
    const float4 st =
        __ldcg(reinterpret_cast<const float4*>(a.ws[owner] + a.tokens * a.stride) + n);
    const float gn = a.grad_output[n];
    const int64_t t = a.target[n] - static_cast<int64_t>(a.rank) * a.vl;
    const T* row = logits + n * a.vl;
    float* out = a.out + n * a.vl;
    for (int64_t c = threadIdx.x; c < a.vl; c += kThreads) {
      const float x = ToF(row[c]);
      const bool is_t = c == t;
      float d = 0.f;
      if (x >= st.x || is_t) d = gn * ((is_t ? 1.f : 0.f) - expf(x - st.y - st.z));
      out[c] = d;
    }
  }
  if (threadIdx.x == 0) a.epochs[blockIdx.x] = e0 + 2;
}

struct State {
  uint32_t* epochs = nullptr;
  int blocks = 0;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int world = ctx->world_size;
  const double top_k = kf_param(ctx, "top_k", 0);
  if (world < 1 || world > kMaxWorld || top_k < 1 || top_k > kMaxTopK) return 1;
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  // Same grid on every rank; all of it resident (blocks wait on peers' blocks),
  // also when the ranks share one GPU.
  int blocks = ctx->emulated ? sms / (2 * world) : 2 * sms;
  const int pad_blocks = static_cast<int>(ctx->signal_pad.nbytes / (sizeof(uint32_t) * world));
  if (blocks > pad_blocks) blocks = pad_blocks;
  if (blocks < 1) blocks = 1;
  State* st = new State;
  st->blocks = blocks;
  if (cudaMalloc(&st->epochs, sizeof(uint32_t) * blocks) != cudaSuccess ||
      cudaMemsetAsync(st->epochs, 0, sizeof(uint32_t) * blocks, ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
    cudaFree(st->epochs);
    delete st;
    return 1;
  }
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  const State* st = static_cast<const State*>(ctx->user);
  const kf_tensor* logits = kf_input(ctx, "logits");
  const kf_tensor* target = kf_input(ctx, "target");
  const kf_tensor* grad_output = kf_input(ctx, "grad_output");
  kf_tensor* out = kf_output(ctx, "grad_logits");
  if (st == nullptr || !logits || !target || !grad_output || !out || logits->ndim != 3) return 1;
  Args a = {};
  a.world = ctx->world_size;
  a.rank = ctx->rank;
  a.tokens = logits->shape[0] * logits->shape[1];
  a.vl = logits->shape[2];
  const int64_t v = a.vl * a.world;
  const int64_t top_k = static_cast<int64_t>(kf_param(ctx, "top_k", 0));
  a.k = static_cast<int>(top_k < v ? top_k : v);
  a.kr = static_cast<int>(a.k < a.vl ? a.k : a.vl);
  a.top_p = kf_param(ctx, "top_p", 1.0);
  a.stride = (kHeader + a.k + 3) / 4 * 4;  // 16-byte records
  if (ctx->workspace.nbytes < static_cast<size_t>(a.tokens) * (a.stride + 4) * sizeof(uint32_t))
    return 1;
  a.logits = logits->data;
  a.target = static_cast<const int64_t*>(target->data);
  a.grad_output = static_cast<const float*>(grad_output->data);
  a.out = static_cast<float*>(out->data);
  for (int r = 0; r < a.world; ++r) {
    a.ws[r] = static_cast<uint32_t*>(ctx->workspace.peers[r]);
    a.pad[r] = static_cast<uint32_t*>(ctx->signal_pad.peers[r]);
  }
  a.epochs = st->epochs;
  if (logits->dtype == KF_BF16)
    LogProbTopKGrad<__nv_bfloat16, 16><<<st->blocks, kThreads, 0, ctx->stream>>>(a);
  else if (logits->dtype == KF_F32)
    LogProbTopKGrad<float, 32><<<st->blocks, kThreads, 0, ctx->stream>>>(a);
  else
    return 2;
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (cudaFree(st->epochs) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
