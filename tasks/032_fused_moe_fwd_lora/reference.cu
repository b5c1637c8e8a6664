// Expert-parallel MoE forward with LoRA experts, baseline as VeOmni's EP MoE layer with
// expert_forward_lora (PKB #32) does it:
//   1. router: softmax over the E logits of a token, top-k (warp per token);
//   2. _preprocess: tokens per expert, an all-gather of every rank's counts ([W, E]), and the
//      counts to the host (PKB's .tolist()) for the split sizes;
//   3. token_pre_all2all: the expert-major permutation (for e = 0..E-1, its tokens in order), the
//      gather of the permuted rows, kf_all_to_allv (NCCL send/recv on real GPUs), and
//      sort_chunks_by_idxs: received [source rank][local expert] chunks regrouped to
//      [local expert][source rank];
//   4. the experts: per local expert with rows, F.linear(gate) and F.linear(up) as cuBLAS GEMMs
//      with the bias preloaded into C (beta = 1, as addmm does); each LoRA term as PKB's
//      F.linear(F.linear(x, A), B): x A^T to a bf16 [rows, R] buffer, then (x A^T) B^T added onto
//      the projection (beta = 1: PKB adds two bf16 tensors, here the sum is rounded once);
//      silu(g) * u; F.linear(down) plus its LoRA term the same way;
//   5. tokens_post_all2all: the inverse regroup, kf_all_to_allv back, and the unpermute, here a
//      gather per token (its k rows at their permuted positions) weighted by p in fp32.
// Every intermediate is bf16, as in the PyTorch layer; sums are fp32.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include <vector>

#include "kforge/kernel.h"

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;
constexpr int kMaxExperts = 256;

using bf16 = __nv_bfloat16;

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

// Warp per token: p = softmax(logits[t]) in fp32; the k largest logits (distinct by the task's
// construction; ties would go to the lower index), their experts and p.
__global__ void RouteTopK(const bf16* __restrict__ logits, int64_t tokens, int experts, int k,
                          int* sel, float* weight) {
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
        sel[t * k + s] = arg;
        weight[t * k + s] = __expf(best - mx) / sum;
      }
      if (lane == arg % 32) v[arg / 32] = -INFINITY;
    }
  }
}

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

// Block e. First pass (perm null): counts[e] = tokens routed to e. Second pass: perm (expert-major,
// token-ascending: PKB's masked_select of token ids) and pos[t*k+s] = the place of (t, s) in it.
__global__ void __launch_bounds__(kThreads) Permute(const int* __restrict__ sel, int64_t tokens,
                                                    int k, long long* counts, int* perm, int* pos) {
  __shared__ int warp_sum[kWarps];
  __shared__ long long running;
  const int e = blockIdx.x;
  long long base = 0;
  if (perm != nullptr)
    for (int q = 0; q < e; ++q) base += counts[q];
  if (threadIdx.x == 0) running = 0;
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t t0 = 0; t0 < tokens; t0 += kThreads) {
    const int64_t t = t0 + threadIdx.x;
    int slot = -1;
    if (t < tokens)
      for (int s = 0; s < k; ++s)
        if (sel[t * k + s] == e) slot = s;
    const unsigned b = __ballot_sync(0xffffffffu, slot >= 0);
    if (lane == 0) warp_sum[warp] = __popc(b);
    __syncthreads();
    if (slot >= 0 && perm != nullptr) {
      long long before = running + __popc(b & ((1u << lane) - 1));
      for (int w = 0; w < warp; ++w) before += warp_sum[w];
      perm[base + before] = static_cast<int>(t);
      pos[t * k + slot] = static_cast<int>(base + before);
    }
    __syncthreads();
    if (threadIdx.x == 0)
      for (int w = 0; w < kWarps; ++w) running += warp_sum[w];
    __syncthreads();
  }
  if (perm == nullptr && threadIdx.x == 0) counts[e] = running;
}

// Copies row src_row of src to row dst_row of dst (hidden bf16 values), a warp per row.
__device__ __forceinline__ void CopyRow(const bf16* src, bf16* dst, int64_t hidden, int lane) {
  if (hidden % 8 == 0) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (int64_t i = lane; i < hidden / 8; i += 32) d[i] = s[i];
  } else {
    for (int64_t i = lane; i < hidden; i += 32) dst[i] = src[i];
  }
}

// out[j] = x[perm[j]] (index_select of the permuted tokens).
__global__ void GatherRows(const bf16* __restrict__ x, const int* __restrict__ perm, bf16* out,
                           int64_t rows, int64_t hidden) {
  const int lane = threadIdx.x % 32;
  for (int64_t j = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; j < rows;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x / 32)
    CopyRow(x + static_cast<int64_t>(perm[j]) * hidden, out + j * hidden, hidden, lane);
}

// sort_chunks_by_idxs. n(p, l) = gathered[p * E + rank * L + l] rows came from rank p for local
// expert l. The received order is p-major ([p][l] chunks), the grouped order l-major. to_grouped:
// received -> grouped (before the experts); else grouped -> received order (after them).
__global__ void Regroup(const bf16* __restrict__ src, bf16* dst,
                        const long long* __restrict__ gathered, int world, int experts, int rank,
                        int64_t hidden, bool to_grouped) {
  __shared__ long long p_major[kMaxExperts + 1], l_major[kMaxExperts + 1];
  const int local = experts / world;
  const int chunks = world * local;
  if (threadIdx.x == 0) {
    long long acc = 0;
    for (int p = 0; p < world; ++p)
      for (int l = 0; l < local; ++l) {
        p_major[p * local + l] = acc;
        acc += gathered[p * experts + rank * local + l];
      }
    p_major[chunks] = acc;
    acc = 0;
    for (int l = 0; l < local; ++l)
      for (int p = 0; p < world; ++p) {
        l_major[l * world + p] = acc;
        acc += gathered[p * experts + rank * local + l];
      }
    l_major[chunks] = acc;
  }
  __syncthreads();
  const long long rows = p_major[chunks];
  const int lane = threadIdx.x % 32;
  for (long long j = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / 32; j < rows;
       j += static_cast<long long>(gridDim.x) * blockDim.x / 32) {
    // j is a row of the grouped order: find its (l, p) chunk.
    int c = 0;
    while (c + 1 < chunks && l_major[c + 1] <= j) ++c;
    const int l = c / world, p = c % world;
    const long long r = p_major[p * local + l] + (j - l_major[c]);
    if (to_grouped)
      CopyRow(src + r * hidden, dst + j * hidden, hidden, lane);
    else
      CopyRow(src + j * hidden, dst + r * hidden, hidden, lane);
  }
}

// The bias rows that the GEMMs accumulate onto (addmm's beta = 1).
__global__ void FillBias(bf16* g, bf16* u, bf16* y, int64_t rows, const bf16* __restrict__ bg,
                         const bf16* __restrict__ bu, const bf16* __restrict__ bd, int64_t ffn,
                         int64_t hidden) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * ffn;
       i += stride) {
    g[i] = bg[i % ffn];
    u[i] = bu[i % ffn];
  }
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * hidden;
       i += stride)
    y[i] = bd[i % hidden];
}

// g = silu(g) * u, in place, computed in fp32 and rounded to bf16.
__global__ void SiluMul(bf16* g, const bf16* __restrict__ u, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float a = __bfloat162float(g[i]);
    g[i] = __float2bfloat16(a / (1.0f + __expf(-a)) * __bfloat162float(u[i]));
  }
}

// out[t] = sum over s of p[t, s] * back[pos[t, s]], fp32, rounded once.
__global__ void Combine(const bf16* __restrict__ back, const int* __restrict__ pos,
                        const float* __restrict__ weight, bf16* out, int64_t tokens, int k,
                        int64_t hidden) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < tokens * hidden;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / hidden, d = i % hidden;
    float acc = 0;
    for (int s = 0; s < k; ++s)
      acc += weight[t * k + s] *
             __bfloat162float(back[static_cast<int64_t>(pos[t * k + s]) * hidden + d]);
    out[i] = __float2bfloat16(acc);
  }
}

// Row-major c[m, n] (+)= a[m, kk] @ b[n, kk]^T (F.linear with weight b), fp32 accumulation.
cublasStatus_t Linear(cublasHandle_t h, int64_t m, int64_t n, int64_t kk, const bf16* a,
                      const bf16* b, bf16* c, float beta) {
  const float alpha = 1.0f;
  return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                      static_cast<int>(kk), &alpha, b, CUDA_R_16BF, static_cast<int>(kk), a,
                      CUDA_R_16BF, static_cast<int>(kk), &beta, c, CUDA_R_16BF, static_cast<int>(n),
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

// c[m, n] += (a[m, kk] @ lora_a[r, kk]^T) @ lora_b[n, r]^T, the product rounded to bf16 in xa.
cublasStatus_t LoraLinear(cublasHandle_t h, int64_t m, int64_t n, int64_t kk, int64_t r,
                          const bf16* a, const bf16* lora_a, const bf16* lora_b, bf16* xa,
                          bf16* c) {
  const cublasStatus_t st = Linear(h, m, r, kk, a, lora_a, xa, 0.0f);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  return Linear(h, m, n, r, xa, lora_b, c, 1.0f);
}

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
  long long* host_counts = nullptr;  // pinned [W * E]
  std::vector<size_t> sc, sd, rc, rd;
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
  if (experts > kMaxExperts || experts % w != 0) return 1;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    return 1;
  if (cudaMallocHost(&st->host_counts, sizeof(long long) * w * experts) != cudaSuccess) return 1;
  for (auto* v : {&st->sc, &st->sd, &st->rc, &st->rd}) v->resize(w);
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
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
  const int64_t local = wg.shape[0], ffn = wg.shape[1], lrank = lga.shape[1];
  const int k = static_cast<int>(kf_param(ctx, "k", 0));
  if (st == nullptr || k < 1 || k > experts || local * w != experts) return 1;
  const int64_t cap = static_cast<int64_t>(w) * tokens * (k < local ? k : local);
  const int64_t routed = tokens * k;  // k distinct experts per token

  // Workspace: sel | p | pos | perm | counts | gathered | send | recv | grouped | g | u | xa.
  char* ws = static_cast<char*>(ctx->workspace.data);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* p = ws + off;
    off += Align(bytes);
    return p;
  };
  int* sel = reinterpret_cast<int*>(take(4 * routed));
  float* weight = reinterpret_cast<float*>(take(4 * routed));
  int* pos = reinterpret_cast<int*>(take(4 * routed));
  int* perm = reinterpret_cast<int*>(take(4 * routed));
  long long* counts = reinterpret_cast<long long*>(take(8 * experts));
  long long* gathered = reinterpret_cast<long long*>(take(8 * experts * w));
  bf16* send = reinterpret_cast<bf16*>(take(2 * routed * hidden));
  bf16* recv = reinterpret_cast<bf16*>(take(2 * cap * hidden));
  bf16* grouped = reinterpret_cast<bf16*>(take(2 * cap * hidden));
  bf16* g = reinterpret_cast<bf16*>(take(2 * cap * ffn));
  bf16* u = reinterpret_cast<bf16*>(take(2 * cap * ffn));
  bf16* xa = reinterpret_cast<bf16*>(take(2 * cap * lrank));
  if (off > ctx->workspace.nbytes) return 1;
  cudaStream_t s = ctx->stream;

  // 1-2. Router, counts, permutation; counts of every rank to the host.
  if (tokens > 0)
    RouteTopK<<<Grid(ctx, tokens * 32, 256), 256, 0, s>>>(
        static_cast<const bf16*>(logits.data), tokens, static_cast<int>(experts), k, sel, weight);
  Permute<<<static_cast<int>(experts), kThreads, 0, s>>>(sel, tokens, k, counts, nullptr, nullptr);
  Permute<<<static_cast<int>(experts), kThreads, 0, s>>>(sel, tokens, k, counts, perm, pos);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_gather(ctx, counts, gathered, static_cast<size_t>(experts), KF_I64) != 0) return 1;
  if (cudaMemcpyAsync(st->host_counts, gathered, sizeof(long long) * w * experts,
                      cudaMemcpyDeviceToHost, s) != cudaSuccess ||
      cudaStreamSynchronize(s) != cudaSuccess)
    return 1;
  const long long* hc = st->host_counts;
  std::vector<int64_t> rows_of(local, 0);  // rows of local expert l, all sources
  size_t sent = 0, got = 0;
  for (int p = 0; p < w; ++p) {
    size_t to_p = 0, from_p = 0;
    for (int64_t l = 0; l < local; ++l) {
      to_p += hc[rank * experts + p * local + l];
      from_p += hc[p * experts + rank * local + l];
      rows_of[l] += hc[p * experts + rank * local + l];
    }
    st->sc[p] = to_p * hidden;
    st->sd[p] = sent * hidden;
    st->rc[p] = from_p * hidden;
    st->rd[p] = got * hidden;
    sent += to_p;
    got += from_p;
  }
  if (static_cast<int64_t>(got) > cap || static_cast<int64_t>(sent) != routed) return 1;

  // 3. Permuted rows, all-to-all, regroup by local expert.
  if (routed > 0)
    GatherRows<<<Grid(ctx, routed * 32, 256), 256, 0, s>>>(static_cast<const bf16*>(x.data), perm,
                                                           send, routed, hidden);
  if (kf_all_to_allv(ctx, send, st->sc.data(), st->sd.data(), recv, st->rc.data(), st->rd.data(),
                     KF_BF16) != 0)
    return 1;
  if (got > 0)
    Regroup<<<Grid(ctx, got * 32, 256), 256, 0, s>>>(recv, grouped, gathered, w,
                                                     static_cast<int>(experts), rank, hidden, true);

  // 4. The experts, one after another (y goes to recv, free again).
  if (cublasSetStream(st->handle, s) != CUBLAS_STATUS_SUCCESS) return 1;
  int64_t first = 0;
  for (int64_t l = 0; l < local; ++l) {
    const int64_t m = rows_of[l];
    if (m == 0) continue;
    bf16* gl = g + first * ffn;
    bf16* ul = u + first * ffn;
    bf16* yl = recv + first * hidden;
    const bf16* xl = grouped + first * hidden;
    const int64_t widest = ffn > hidden ? ffn : hidden;
    const int fill_grid = Grid(ctx, m * widest, 256);
    FillBias<<<fill_grid, 256, 0, s>>>(gl, ul, yl, m, static_cast<const bf16*>(bg.data) + l * ffn,
                                       static_cast<const bf16*>(bu.data) + l * ffn,
                                       static_cast<const bf16*>(bd.data) + l * hidden, ffn, hidden);
    auto at = [&](const kf_tensor& t, int64_t n) {
      return static_cast<const bf16*>(t.data) + l * n;
    };
    if (Linear(st->handle, m, ffn, hidden, xl, at(wg, ffn * hidden), gl, 1.0f) !=
            CUBLAS_STATUS_SUCCESS ||
        LoraLinear(st->handle, m, ffn, hidden, lrank, xl, at(lga, lrank * hidden),
                   at(lgb, ffn * lrank), xa, gl) != CUBLAS_STATUS_SUCCESS ||
        Linear(st->handle, m, ffn, hidden, xl, at(wu, ffn * hidden), ul, 1.0f) !=
            CUBLAS_STATUS_SUCCESS ||
        LoraLinear(st->handle, m, ffn, hidden, lrank, xl, at(lua, lrank * hidden),
                   at(lub, ffn * lrank), xa, ul) != CUBLAS_STATUS_SUCCESS)
      return 1;
    SiluMul<<<Grid(ctx, m * ffn, 256), 256, 0, s>>>(gl, ul, m * ffn);
    if (Linear(st->handle, m, hidden, ffn, gl, at(wd, hidden * ffn), yl, 1.0f) !=
            CUBLAS_STATUS_SUCCESS ||
        LoraLinear(st->handle, m, hidden, ffn, lrank, gl, at(lda, lrank * ffn),
                   at(ldb, hidden * lrank), xa, yl) != CUBLAS_STATUS_SUCCESS)
      return 1;
    first += m;
  }

  // 5. Back to the received order, all-to-all back (into send), weighted gather per token.
  if (got > 0)
    Regroup<<<Grid(ctx, got * 32, 256), 256, 0, s>>>(
        recv, grouped, gathered, w, static_cast<int>(experts), rank, hidden, false);
  if (kf_all_to_allv(ctx, grouped, st->rc.data(), st->rd.data(), send, st->sc.data(), st->sd.data(),
                     KF_BF16) != 0)
    return 1;
  if (tokens > 0)
    Combine<<<Grid(ctx, tokens * hidden, 256), 256, 0, s>>>(
        send, pos, weight, static_cast<bf16*>(out.data), tokens, k, hidden);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = 0;
  if (st->handle != nullptr && cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  if (st->cublas_ws != nullptr && cudaFree(st->cublas_ws) != cudaSuccess) rc = 1;
  if (st->host_counts != nullptr && cudaFreeHost(st->host_counts) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
