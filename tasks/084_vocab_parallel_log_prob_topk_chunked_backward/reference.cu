// Gradient of the chunked top-k / top-p log-probabilities, as NeMo-RL does it
// (ChunkedDistributedLogprobWithSampling.backward, PKB #84): the B*S tokens go
// in chunks of B*chunk consecutive tokens (the last may be shorter), and for
// each chunk a harness all-to-all turns its vocabulary shards into full rows of
// chunk/W tokens per rank; a row kernel recomputes the filter and writes each
// row's gradient g * (onehot(target) - p) on the support (0 elsewhere), in
// f32, already in the order the way back needs; a second harness all-to-all
// sends every rank its vocabulary shard of the chunk's gradient rows, straight
// into the output. Only one chunk's rows and gradients are ever held.
//
// The row kernel, one block per row: a radix select (8-bit digits, two passes
// for bf16 keys, four for f32) finds tau, the k-th largest logit counted with
// multiplicity; one more pass collects the logits above tau (fewer than k) and
// counts those equal to it; warp 0 does the top-p test in fp64 over those few
// values; then the block writes the row's gradient.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxTopK = 1024;  // the logits strictly above tau: fewer than top_k

__device__ __forceinline__ float ToF(float v) { return v; }
__device__ __forceinline__ float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }

// Order-preserving unsigned key of a logit (-0 taken as +0), on the dtype's
// bits: 16 for bf16, 32 for f32.
template <int kKeyBits>
__device__ __forceinline__ uint32_t KeyOf(float x) {
  uint32_t u = __float_as_uint(x);
  if (u == 0x80000000u) u = 0;
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

struct Smem {
  uint32_t hist[256];
  float list[kMaxTopK];
  double q[kMaxTopK];
  uint32_t n_gt, n_eq, digit, rank;
  float tau, zt;
  float theta, m, log_z;  // the row's support {z >= theta} + target, max, log of its normaliser
};

// Rows live in `recv` as W segments: segment p of row i (global columns
// p*vl .. p*vl+vl-1) at recv + (p*rows + i)*vl, the all-to-all's layout.
template <typename T, int kKeyBits>
__global__ void __launch_bounds__(kThreads)
    FilterRows(const T* __restrict__ recv, int64_t rows, int64_t vl, int world,
               const int64_t* __restrict__ target, const float* __restrict__ grad_output,
               int64_t top_k, double top_p, float* __restrict__ grad) {
  __shared__ Smem sh;
  const int lane = threadIdx.x & 31;
  const int64_t v_total = vl * world;
  const int64_t k = top_k < v_total ? top_k : v_total;
  for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {
    // Radix select: the digits of tau's key, most significant first; `rank`
    // is tau's rank (1-based, from the top) among the keys matching the prefix.
    uint32_t prefix = 0, mask = 0;
    if (threadIdx.x == 0) sh.rank = static_cast<uint32_t>(k);
    for (int shift = kKeyBits - 8; shift >= 0; shift -= 8) {
      for (int b = threadIdx.x; b < 256; b += kThreads) sh.hist[b] = 0;
      __syncthreads();
      for (int p = 0; p < world; ++p) {
        const T* seg = recv + (static_cast<int64_t>(p) * rows + i) * vl;
        for (int64_t c0 = 0; c0 < vl; c0 += kThreads) {  // uniform trip count: full warps
          const int64_t c = c0 + threadIdx.x;
          uint32_t bin = 256;
          if (c < vl) {
            const uint32_t key = KeyOf<kKeyBits>(ToF(seg[c]));
            if ((key & mask) == prefix) bin = (key >> shift) & 255u;
          }
          const uint32_t peers = __match_any_sync(0xffffffffu, bin);
          if (bin < 256 && lane == __ffs(peers) - 1) atomicAdd(&sh.hist[bin], __popc(peers));
        }
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        uint32_t above = 0, d = 255;
        for (;; --d) {
          if (above + sh.hist[d] >= sh.rank || d == 0) break;
          above += sh.hist[d];
        }
        sh.digit = d;
        sh.rank -= above;
      }
      __syncthreads();
      prefix |= sh.digit << shift;
      mask |= 255u << shift;
    }
    // Collect: the logits above tau (fewer than k) and the count equal to it.
    if (threadIdx.x == 0) {
      sh.n_gt = 0;
      sh.n_eq = 0;
      const int64_t t = target[i];
      sh.zt = ToF(recv[((t / vl) * rows + i) * vl + t % vl]);
    }
    __syncthreads();
    uint32_t eq = 0;
    for (int p = 0; p < world; ++p) {
      const T* seg = recv + (static_cast<int64_t>(p) * rows + i) * vl;
      for (int64_t c = threadIdx.x; c < vl; c += kThreads) {
        const float x = ToF(seg[c]);
        const uint32_t key = KeyOf<kKeyBits>(x);
        if (key > prefix) {
          const uint32_t slot = atomicAdd(&sh.n_gt, 1u);
          if (slot < kMaxTopK) sh.list[slot] = x;
        } else if (key == prefix) {
          ++eq;
          sh.tau = x;  // all equal
        }
      }
    }
    if (eq != 0) atomicAdd(&sh.n_eq, eq);
    __syncthreads();
    // Top-p in fp64 over the groups above tau and tau's own group (n_eq copies).
    if (threadIdx.x < 32) {
      const int n = static_cast<int>(sh.n_gt);
      const float tau = sh.tau;
      float m = tau;
      for (int e = lane; e < n; e += 32) m = fmaxf(m, sh.list[e]);
      m = WarpMax(m);
      for (int e = lane; e < n; e += 32) sh.q[e] = exp(static_cast<double>(sh.list[e]) - m);
      const double q_tau = static_cast<double>(sh.n_eq) * exp(static_cast<double>(tau) - m);
      __syncwarp();
      double zk = 0;
      for (int e = lane; e < n; e += 32) zk += sh.q[e];
      zk = WarpSum(zk) + q_tau;
      const double limit = top_p * zk;
      float theta = INFINITY;
      double zs = 0;
      for (int e = lane; e <= n; e += 32) {
        const float v = e < n ? sh.list[e] : tau;
        double above = 0;  // mass of the strictly larger logits (tau's group is never above)
        for (int j = 0; j < n; ++j) above += sh.list[j] > v ? sh.q[j] : 0.0;
        if (above < limit) {
          theta = fminf(theta, v);
          zs += e < n ? sh.q[e] : q_tau;
        }
      }
      theta = WarpMin(theta);
      zs = WarpSum(zs);
      const float zt = sh.zt;
      if (zt < theta) zs += exp(static_cast<double>(zt) - m);  // the target is always kept
      if (lane == 0) {
        sh.theta = theta;
        sh.m = m;
        sh.log_z = static_cast<float>(log(zs));
      }
    }
    __syncthreads();
    // grad[v] = g * ([v == t] - exp(z[v] - m - log_z)) on the support, 0 elsewhere;
    // segment p of the row goes to rank p on the way back: same layout as recv.
    const float theta = sh.theta, m = sh.m, log_z = sh.log_z, g = grad_output[i];
    const int64_t t = target[i];
    for (int p = 0; p < world; ++p) {
      const int64_t off = (static_cast<int64_t>(p) * rows + i) * vl;
      const int64_t t_local = t - static_cast<int64_t>(p) * vl;
      for (int64_t c = threadIdx.x; c < vl; c += kThreads) {
        const float x = ToF(recv[off + c]);
        const bool is_t = c == t_local;
        float d = 0.f;
        if (x >= theta || is_t) d = g * ((is_t ? 1.f : 0.f) - expf(x - m - log_z));
        grad[off + c] = d;
      }
    }
    __syncthreads();  // sh is reused by the next row
  }
}

template <typename T, int kKeyBits>
int Run(kf_ctx* ctx) {
  const kf_tensor* logits = kf_input(ctx, "logits");
  const kf_tensor* target = kf_input(ctx, "target");
  const kf_tensor* grad_output = kf_input(ctx, "grad_output");
  kf_tensor* out = kf_output(ctx, "grad_logits");
  if (!logits || !target || !grad_output || !out || logits->ndim != 3) return 1;
  const int world = ctx->world_size;
  const int64_t tokens = logits->shape[0] * logits->shape[1], vl = logits->shape[2];
  const int64_t chunk_tokens = logits->shape[0] * static_cast<int64_t>(kf_param(ctx, "chunk", 0));
  const int64_t top_k = static_cast<int64_t>(kf_param(ctx, "top_k", 0));
  const double top_p = kf_param(ctx, "top_p", 1.0);
  if (tokens % world != 0 || chunk_tokens < 1 || chunk_tokens % world != 0 || top_k < 1 ||
      top_k > kMaxTopK)
    return 1;
  const size_t elem = kf_dtype_size(logits->dtype);
  const size_t recv_bytes = (static_cast<size_t>(chunk_tokens * vl) * elem + 255) / 256 * 256;
  if (ctx->workspace.nbytes < recv_bytes + static_cast<size_t>(chunk_tokens * vl) * sizeof(float))
    return 1;
  T* recv = static_cast<T*>(ctx->workspace.data);
  float* grad = reinterpret_cast<float*>(static_cast<char*>(ctx->workspace.data) + recv_bytes);
  const T* x = static_cast<const T*>(logits->data);
  const int64_t* tgt = static_cast<const int64_t*>(target->data);
  const float* g = static_cast<const float*>(grad_output->data);
  float* y = static_cast<float*>(out->data);
  for (int64_t start = 0; start < tokens; start += chunk_tokens) {
    const int64_t cur = tokens - start < chunk_tokens ? tokens - start : chunk_tokens;
    const int64_t rows = cur / world;  // this rank's tokens of the chunk: start + rank*rows ..
    // Block p of the chunk's send buffer is the shard of rank p's tokens.
    if (kf_all_to_all(ctx, x + start * vl, recv, static_cast<size_t>(rows * vl), logits->dtype) !=
        0)
      return 1;
    const int grid = static_cast<int>(rows < 4096 ? rows : 4096);
    const int64_t mine = start + ctx->rank * rows;
    FilterRows<T, kKeyBits><<<grid, kThreads, 0, ctx->stream>>>(recv, rows, vl, world, tgt + mine,
                                                                g + mine, top_k, top_p, grad);
    if (cudaGetLastError() != cudaSuccess) return 1;
    // Block p (rank p's shard of this rank's rows) goes to rank p, which gets the
    // chunk's rows in token order: rows start .. start+cur-1 of its output.
    if (kf_all_to_all(ctx, grad, y + start * vl, static_cast<size_t>(rows * vl), KF_F32) != 0)
      return 1;
  }
  return 0;
}

}  // namespace

extern "C" int kf_run(kf_ctx* ctx) {
  switch (ctx->inputs[0].dtype) {
    case KF_BF16:
      return Run<__nv_bfloat16, 16>(ctx);
    case KF_F32:
      return Run<float, 32>(ctx);
    default:
      return 2;
  }
}
