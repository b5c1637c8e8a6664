// MoE forward with LoRA experts by pulling through the peer pointers (task 031's solution with
// the adapters added to step 4): no token is permuted, staged, exchanged by all-to-all or
// regrouped, and no expert output goes back through an all-to-all.
//   1. Router (warp per token): softmax, top-k, and for each choice (t, e) a slot in this rank's
//      list of tokens for expert e (an atomic per expert): list[e][slot] = t.
//   2. Barrier through the signal pad: every rank's lists and counts are written.
//   3. Each rank, as the owner of experts r*L .. r*L+L-1, reads the counts its experts got from
//      every source rank and lays its rows out expert-major, source-minor (off[l][p]); the row
//      counts go to the host (the only host round trip: cuBLAS needs M), then a warp per row pulls
//      the token row straight from the source rank's hidden_states.
//   4. The experts: cuBLAS gate and up GEMMs, each LoRA term added onto them by two thin GEMMs
//      (x A^T into a [rows, R] buffer, then (x A^T) B^T with beta = 1), silu(g + b_gate) *
//      (u + b_up) in fp32, the down GEMM and its LoRA term into y in the symmetric workspace.
//   5. Barrier: every owner's y is written.
//   6. Combine, warp per token: its k rows are read from the owners' y at off_o[l][rank] + slot,
//      b_down added, weighted by p and summed in fp32, rounded once.
// Reuse across calls is safe without an end barrier: a rank rewrites its lists only after the
// second barrier of the previous call (all owners have pulled), and an owner rewrites off and y
// only after the first barrier of the next call (all ranks have combined).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include <vector>

#include "kforge/kernel.h"

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;
constexpr int kMaxExperts = 256;
constexpr int kMaxSlots = 32;

using bf16 = __nv_bfloat16;

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

// Byte offsets of this task's tables in the (symmetric) workspace: the same on every rank.
struct Layout {
  size_t sel, weight, slot, cnt, list, off, meta, x, g, u, y, xa, end;
};

Layout MakeLayout(int64_t tokens, int64_t k, int64_t experts, int world, int64_t hidden,
                  int64_t ffn, int64_t lrank, int64_t cap) {
  Layout L{};
  size_t o = 0;
  auto take = [&](size_t bytes) {
    const size_t at = o;
    o += Align(bytes);
    return at;
  };
  L.sel = take(4 * tokens * k);
  L.weight = take(4 * tokens * k);
  L.slot = take(4 * tokens * k);
  L.cnt = take(4 * experts);
  L.list = take(4 * experts * tokens);
  L.off = take(4 * (experts + 1));  // [L][W] + total
  L.meta = take(8 * (experts / world + 1));
  L.x = take(2 * cap * hidden);
  L.g = take(2 * cap * ffn);
  L.u = take(2 * cap * ffn);
  L.y = take(2 * cap * hidden);
  L.xa = take(2 * 2 * cap * lrank);  // x A^T of the gate and up adapters (the down one reuses it)
  L.end = o;
  return L;
}

struct Peers {
  char* ws[KF_MAX_RANKS];
  const bf16* x[KF_MAX_RANKS];
  const bf16* bd[KF_MAX_RANKS];
  uint32_t* pad[KF_MAX_RANKS];
};

__global__ void Barrier(Peers p, uint32_t* epoch, int rank, int world) {
  const uint32_t e = *epoch + 1;
  if (threadIdx.x < world && threadIdx.x != rank) {
    kf_signal(p.pad[threadIdx.x] + rank, e);
    kf_wait(p.pad[rank] + threadIdx.x, e);
  }
  __syncthreads();
  if (threadIdx.x == 0) *epoch = e;
}

// Warp per token: softmax, top-k by logit (distinct in a row), and a slot in list[e].
__global__ void Route(const bf16* __restrict__ logits, int64_t tokens, int experts, int k, int* sel,
                      float* weight, int* slot, int* cnt, int* list) {
  constexpr int kPer = kMaxExperts / 32;
  const int lane = threadIdx.x % 32;
  for (int64_t t = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x / 32) {
    float v[kPer];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      v[i] = e < experts ? __bfloat162float(logits[t * experts + e]) : -INFINITY;
      mx = fmaxf(mx, v[i]);
    }
    for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (lane + 32 * i < experts) sum += __expf(v[i] - mx);
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    for (int s = 0; s < k; ++s) {
      float best = -INFINITY;
      int arg = 0x7fffffff;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int e = lane + 32 * i;
        if (e < experts && (v[i] > best || (v[i] == best && e < arg))) best = v[i], arg = e;
      }
      for (int o = 16; o > 0; o /= 2) {
        const float ob = __shfl_xor_sync(0xffffffffu, best, o);
        const int oa = __shfl_xor_sync(0xffffffffu, arg, o);
        if (ob > best || (ob == best && oa < arg)) best = ob, arg = oa;
      }
      if (lane == 0) {
        const int at = atomicAdd(cnt + arg, 1);
        list[static_cast<int64_t>(arg) * tokens + at] = static_cast<int>(t);
        sel[t * k + s] = arg;
        slot[t * k + s] = at;
        weight[t * k + s] = __expf(best - mx) / sum;
      }
      if (lane == arg % 32) v[arg / 32] = -INFINITY;
    }
  }
}

// Owner side: off[l * W + p] = first row of (local expert l, source p), l-major; off[L * W] =
// total; meta[l] = rows of l, meta[L] = total (to the host).
__global__ void Offsets(Peers p, size_t cnt_at, size_t off_at, size_t meta_at, int rank, int world,
                        int local) {
  int* off = reinterpret_cast<int*>(p.ws[rank] + off_at);
  long long* meta = reinterpret_cast<long long*>(p.ws[rank] + meta_at);
  if (threadIdx.x == 0) {
    int acc = 0;
    for (int l = 0; l < local; ++l) {
      const int begin = acc;
      for (int q = 0; q < world; ++q) {
        off[l * world + q] = acc;
        acc += reinterpret_cast<const int*>(p.ws[q] + cnt_at)[rank * local + l];
      }
      meta[l] = acc - begin;
    }
    off[local * world] = acc;
    meta[local] = acc;
  }
}

__device__ __forceinline__ void CopyRow(const bf16* src, bf16* dst, int64_t hidden, int lane) {
  if (hidden % 8 == 0) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (int64_t i = lane; i < hidden / 8; i += 32) d[i] = s[i];
  } else {
    for (int64_t i = lane; i < hidden; i += 32) dst[i] = src[i];
  }
}

// Warp per owner row j: find its (l, p) block, the token from p's list, its row from p's tokens.
__global__ void Pull(Peers p, size_t list_at, const int* __restrict__ off, bf16* xs, int rank,
                     int world, int local, int64_t tokens, int64_t hidden) {
  const int lane = threadIdx.x % 32;
  const int blocks = world * local;
  const int total = off[blocks];
  for (int64_t j = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; j < total;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x / 32) {
    int c = 0;
    while (c + 1 < blocks && off[c + 1] <= j) ++c;
    const int l = c / world, q = c % world;
    const int e = rank * local + l;
    const int t = reinterpret_cast<const int*>(
        p.ws[q] + list_at)[static_cast<int64_t>(e) * tokens + (j - off[c])];
    CopyRow(p.x[q] + static_cast<int64_t>(t) * hidden, xs + j * hidden, hidden, lane);
  }
}

// g = silu(g + bg) * (u + bu) over rows x ffn, fp32, rounded once.
__global__ void SiluMulBias(bf16* g, const bf16* __restrict__ u, const bf16* __restrict__ bg,
                            const bf16* __restrict__ bu, int64_t rows, int64_t ffn) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * ffn;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t f = i % ffn;
    const float a = __bfloat162float(g[i]) + __bfloat162float(bg[f]);
    const float b = __bfloat162float(u[i]) + __bfloat162float(bu[f]);
    g[i] = __float2bfloat16(a / (1.0f + __expf(-a)) * b);
  }
}

// Warp per token: out[t] = sum over s of p * (y_owner[row] + b_down_owner[l]).
__global__ void Combine(Peers p, size_t off_at, size_t y_at, const int* __restrict__ sel,
                        const int* __restrict__ slot, const float* __restrict__ weight, bf16* out,
                        int rank, int world, int local, int64_t tokens, int k, int64_t hidden) {
  const int lane = threadIdx.x % 32;
  for (int64_t t = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x / 32) {
    const bf16* row[kMaxSlots];
    const bf16* bias[kMaxSlots];
    float w[kMaxSlots];
    for (int s = 0; s < k; ++s) {
      const int e = sel[t * k + s];
      const int o = e / local, l = e % local;
      const int at =
          reinterpret_cast<const int*>(p.ws[o] + off_at)[l * world + rank] + slot[t * k + s];
      row[s] = reinterpret_cast<const bf16*>(p.ws[o] + y_at) + static_cast<int64_t>(at) * hidden;
      bias[s] = p.bd[o] + static_cast<int64_t>(l) * hidden;
      w[s] = weight[t * k + s];
    }
    bf16* dst = out + t * hidden;
    if (hidden % 8 == 0) {
      for (int64_t d = lane * 8; d < hidden; d += 32 * 8) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int s = 0; s < k; ++s) {
          const uint4 yv = *reinterpret_cast<const uint4*>(row[s] + d);
          const uint4 bv = *reinterpret_cast<const uint4*>(bias[s] + d);
          const bf16* yb = reinterpret_cast<const bf16*>(&yv);
          const bf16* bb = reinterpret_cast<const bf16*>(&bv);
#pragma unroll
          for (int q = 0; q < 8; ++q)
            acc[q] += w[s] * (__bfloat162float(yb[q]) + __bfloat162float(bb[q]));
        }
        uint4 o;
        bf16* ob = reinterpret_cast<bf16*>(&o);
#pragma unroll
        for (int q = 0; q < 8; ++q) ob[q] = __float2bfloat16(acc[q]);
        *reinterpret_cast<uint4*>(dst + d) = o;
      }
    } else {
      for (int64_t d = lane; d < hidden; d += 32) {
        float acc = 0;
        for (int s = 0; s < k; ++s)
          acc += w[s] * (__bfloat162float(row[s][d]) + __bfloat162float(bias[s][d]));
        dst[d] = __float2bfloat16(acc);
      }
    }
  }
}

// Row-major c[m, n] (+)= a[m, kk] @ b[n, kk]^T, fp32 accumulation, bf16 out.
cublasStatus_t Linear(cublasHandle_t h, int64_t m, int64_t n, int64_t kk, const bf16* a,
                      const bf16* b, bf16* c, float beta = 0.0f) {
  const float alpha = 1.0f;
  return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                      static_cast<int>(kk), &alpha, b, CUDA_R_16BF, static_cast<int>(kk), a,
                      CUDA_R_16BF, static_cast<int>(kk), &beta, c, CUDA_R_16BF, static_cast<int>(n),
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
  uint32_t* epoch = nullptr;
  long long* host_meta = nullptr;  // pinned [L + 1]
};

int Grid(const kf_ctx* ctx, int64_t work, int threads) {
  const int64_t most = 8LL * (ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1);
  int64_t g = (work + threads - 1) / threads;
  if (g > most) g = most;
  return g < 1 ? 1 : static_cast<int>(g);
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  State* st = new State;
  ctx->user = st;
  const int w = ctx->world_size;
  const int64_t experts = kf_input(ctx, "router_logits")->shape[1];
  const int k = static_cast<int>(kf_param(ctx, "k", 0));
  if (experts > kMaxExperts || experts % w != 0 || k < 1 || k > kMaxSlots || k > experts ||
      w > 1024)
    return 1;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    return 1;
  if (cudaMallocHost(&st->host_meta, sizeof(long long) * (experts / w + 1)) != cudaSuccess)
    return 1;
  if (cudaMalloc(&st->epoch, sizeof(uint32_t)) != cudaSuccess ||
      cudaMemsetAsync(st->epoch, 0, sizeof(uint32_t), ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess)
    return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 1;
  const kf_tensor& x = *kf_input(ctx, "hidden_states");
  const kf_tensor& logits = *kf_input(ctx, "router_logits");
  const kf_tensor& wg = *kf_input(ctx, "w_gate");
  const kf_tensor& bg = *kf_input(ctx, "b_gate");
  const kf_tensor& wu = *kf_input(ctx, "w_up");
  const kf_tensor& bu = *kf_input(ctx, "b_up");
  const kf_tensor& wd = *kf_input(ctx, "w_down");
  const kf_tensor& bd = *kf_input(ctx, "b_down");
  const kf_tensor& lga = *kf_input(ctx, "lora_gate_A");
  const kf_tensor& lgb = *kf_input(ctx, "lora_gate_B");
  const kf_tensor& lua = *kf_input(ctx, "lora_up_A");
  const kf_tensor& lub = *kf_input(ctx, "lora_up_B");
  const kf_tensor& lda = *kf_input(ctx, "lora_down_A");
  const kf_tensor& ldb = *kf_input(ctx, "lora_down_B");
  kf_tensor& out = *kf_output(ctx, "out");
  const int w = ctx->world_size, rank = ctx->rank;
  const int64_t tokens = x.shape[0], hidden = x.shape[1], experts = logits.shape[1];
  const int local = static_cast<int>(wg.shape[0]);
  const int64_t ffn = wg.shape[1], lrank = lga.shape[1];
  const int k = static_cast<int>(kf_param(ctx, "k", 0));
  const int64_t cap = static_cast<int64_t>(w) * tokens * (k < local ? k : local);
  const Layout lay = MakeLayout(tokens, k, experts, w, hidden, ffn, lrank, cap);
  if (lay.end > ctx->workspace.nbytes) return 1;
  char* ws = static_cast<char*>(ctx->workspace.data);
  Peers p = {};
  for (int q = 0; q < w; ++q) {
    p.ws[q] = static_cast<char*>(ctx->workspace.peers[q]);
    p.x[q] = static_cast<const bf16*>(x.peers[q]);
    p.bd[q] = static_cast<const bf16*>(bd.peers[q]);
    p.pad[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
  }
  int* sel = reinterpret_cast<int*>(ws + lay.sel);
  float* weight = reinterpret_cast<float*>(ws + lay.weight);
  int* slot = reinterpret_cast<int*>(ws + lay.slot);
  int* cnt = reinterpret_cast<int*>(ws + lay.cnt);
  bf16* xs = reinterpret_cast<bf16*>(ws + lay.x);
  bf16* g = reinterpret_cast<bf16*>(ws + lay.g);
  bf16* u = reinterpret_cast<bf16*>(ws + lay.u);
  bf16* y = reinterpret_cast<bf16*>(ws + lay.y);
  bf16* xa_g = reinterpret_cast<bf16*>(ws + lay.xa);
  bf16* xa_u = xa_g + cap * lrank;
  cudaStream_t s = ctx->stream;
  const int bthreads = 32 * ((w + 31) / 32);

  if (cudaMemsetAsync(cnt, 0, 4 * experts, s) != cudaSuccess) return 1;
  Route<<<Grid(ctx, tokens * 32, 256), 256, 0, s>>>(static_cast<const bf16*>(logits.data), tokens,
                                                    static_cast<int>(experts), k, sel, weight, slot,
                                                    cnt, reinterpret_cast<int*>(ws + lay.list));
  Barrier<<<1, bthreads, 0, s>>>(p, st->epoch, rank, w);
  Offsets<<<1, 32, 0, s>>>(p, lay.cnt, lay.off, lay.meta, rank, w, local);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (cudaMemcpyAsync(st->host_meta, ws + lay.meta, sizeof(long long) * (local + 1),
                      cudaMemcpyDeviceToHost, s) != cudaSuccess ||
      cudaStreamSynchronize(s) != cudaSuccess)
    return 1;
  const long long total = st->host_meta[local];
  if (total > cap) return 1;
  if (total > 0)
    Pull<<<Grid(ctx, total * 32, 256), 256, 0, s>>>(p, lay.list,
                                                    reinterpret_cast<const int*>(ws + lay.off), xs,
                                                    rank, w, local, tokens, hidden);
  if (cublasSetStream(st->handle, s) != CUBLAS_STATUS_SUCCESS) return 1;
  int64_t first = 0;
  for (int l = 0; l < local; ++l) {
    const int64_t m = st->host_meta[l];
    if (m == 0) continue;
    const bf16* xl = xs + first * hidden;
    bf16* gl = g + first * ffn;
    bf16* ul = u + first * ffn;
    auto at = [&](const kf_tensor& t, int64_t n) {
      return static_cast<const bf16*>(t.data) + l * n;
    };
    bf16* yl = y + first * hidden;
    if (Linear(st->handle, m, ffn, hidden, xl, at(wg, ffn * hidden), gl) != CUBLAS_STATUS_SUCCESS ||
        Linear(st->handle, m, ffn, hidden, xl, at(wu, ffn * hidden), ul) != CUBLAS_STATUS_SUCCESS ||
        Linear(st->handle, m, lrank, hidden, xl, at(lga, lrank * hidden), xa_g) !=
            CUBLAS_STATUS_SUCCESS ||
        Linear(st->handle, m, lrank, hidden, xl, at(lua, lrank * hidden), xa_u) !=
            CUBLAS_STATUS_SUCCESS ||
        Linear(st->handle, m, ffn, lrank, xa_g, at(lgb, ffn * lrank), gl, 1.0f) !=
            CUBLAS_STATUS_SUCCESS ||
        Linear(st->handle, m, ffn, lrank, xa_u, at(lub, ffn * lrank), ul, 1.0f) !=
            CUBLAS_STATUS_SUCCESS)
      return 1;
    SiluMulBias<<<Grid(ctx, m * ffn, 256), 256, 0, s>>>(gl, ul, at(bg, ffn), at(bu, ffn), m, ffn);
    if (Linear(st->handle, m, hidden, ffn, gl, at(wd, hidden * ffn), yl) != CUBLAS_STATUS_SUCCESS ||
        Linear(st->handle, m, lrank, ffn, gl, at(lda, lrank * ffn), xa_g) !=
            CUBLAS_STATUS_SUCCESS ||
        Linear(st->handle, m, hidden, lrank, xa_g, at(ldb, hidden * lrank), yl, 1.0f) !=
            CUBLAS_STATUS_SUCCESS)
      return 1;
    first += m;
  }
  Barrier<<<1, bthreads, 0, s>>>(p, st->epoch, rank, w);
  Combine<<<Grid(ctx, tokens * 32, 256), 256, 0, s>>>(p, lay.off, lay.y, sel, slot, weight,
                                                      static_cast<bf16*>(out.data), rank, w, local,
                                                      tokens, k, hidden);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (st->handle != nullptr && cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  if (st->cublas_ws != nullptr && cudaFree(st->cublas_ws) != cudaSuccess) rc = 1;
  if (st->epoch != nullptr && cudaFree(st->epoch) != cudaSuccess) rc = 1;
  if (st->host_meta != nullptr && cudaFreeHost(st->host_meta) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
