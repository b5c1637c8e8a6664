// Kimi Delta Attention CP x TP without the redundant work: upstream has every rank of a CP group
// run all heads over the group's whole sequence. Here CP rank c runs only heads c, c + CP, ..:
// after a start barrier, one kernel pulls those heads' rows for the whole sequence straight from
// the CP group's input buffers (normalising q and k and turning g into per-channel decays on the
// way), the recurrence stores each output row as an fp32 partial directly into the ranks that own
// that position (both TP partners), and after an end barrier each rank adds its TP group's
// partials (or, without TP, the recurrence stores the output itself). No collectives, and the
// TP sum rounds once instead of three times.
#include <cuda_bf16.h>

#include <cstdint>

#include "kforge/kernel.h"

namespace {

constexpr int kPullWarps = 8;
constexpr int kThreads = 256;
constexpr int kWarps = 4;
constexpr int kColsPerWarp = 4;
constexpr int kColsPerBlock = kWarps * kColsPerWarp;
constexpr float kLowerBound = -5.f;

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Every rank's block 0 tells every peer it reached this point, then waits for all of them. Slots
// [base, base + W) of the pad; epoch counts this barrier's calls.
__global__ void Barrier(kf_buffer pad, int rank, int world, int base, uint32_t* epoch) {
  if (threadIdx.x < world) {
    const uint32_t e = *epoch + 1;
    kf_signal(static_cast<uint32_t*>(pad.peers[threadIdx.x]) + base + rank, e);
    kf_wait(static_cast<uint32_t*>(pad.data) + base + threadIdx.x, e);
  }
  __syncthreads();
  if (threadIdx.x == 0) *epoch += 1;
}

// The CP group's input buffers, by CP position.
struct CpInputs {
  const void* q[KF_MAX_RANKS];
  const void* k[KF_MAX_RANKS];
  const void* g[KF_MAX_RANKS];
  const void* v[KF_MAX_RANKS];
  const void* b[KF_MAX_RANKS];
};

// Where the output rows go: per world rank, its output and its workspace (fp32 partials).
struct Dest {
  void* o[KF_MAX_RANKS];
  void* ws[KF_MAX_RANKS];
};

// One warp per (owned head a, position t): rank t / S's row of head h = c + a * CP, written as
// qn * DK^-0.5, kn, decay (fp32, [A][T][DK]), v ([A][T][DV]) and sigmoid(beta) (fp32, [A][T]).
template <typename T>
__global__ void __launch_bounds__(kPullWarps * 32)
    Pull(CpInputs in, const T* a_log, const T* dt_bias, float* qn, float* kn, float* decay, T* vh,
         float* beta, int c, int cp, int64_t owned, int64_t s, int64_t heads, int dk, int dv) {
  const int lane = threadIdx.x & 31;
  const int64_t total = cp * s, rows = owned * total;
  for (int64_t row = blockIdx.x * (int64_t)kPullWarps + (threadIdx.x >> 5); row < rows;
       row += (int64_t)gridDim.x * kPullWarps) {
    const int64_t a = row / total, t = row % total, h = c + a * cp;
    if (h >= heads) continue;
    const int p = static_cast<int>(t / s);
    const int64_t src = (t % s) * heads + h;
    const T* q = static_cast<const T*>(in.q[p]) + src * dk;
    const T* k = static_cast<const T*>(in.k[p]) + src * dk;
    const T* g = static_cast<const T*>(in.g[p]) + src * dk;
    float qr[8], kr[8], qq = 0.f, kk = 0.f;
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      const int i = lane + 32 * m;
      qr[m] = i < dk ? ToFloat(q[i]) : 0.f;
      kr[m] = i < dk ? ToFloat(k[i]) : 0.f;
      qq += qr[m] * qr[m];
      kk += kr[m] * kr[m];
    }
    qq = WarpSum(qq);
    kk = WarpSum(kk);
    const float qs = rsqrtf(static_cast<float>(dk)) / fmaxf(sqrtf(qq), 1e-12f);
    const float ks = 1.f / fmaxf(sqrtf(kk), 1e-12f);
    const float scale_a = expf(ToFloat(a_log[h]));
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      const int i = lane + 32 * m;
      if (i < dk) {
        qn[row * dk + i] = qr[m] * qs;
        kn[row * dk + i] = kr[m] * ks;
        const float x = scale_a * (ToFloat(g[i]) + ToFloat(dt_bias[h * dk + i]));
        decay[row * dk + i] = expf(kLowerBound / (1.f + expf(-x)));
      }
    }
    const T* v = static_cast<const T*>(in.v[p]) + src * dv;
    for (int j = lane; j < dv; j += 32) vh[row * dv + j] = v[j];
    if (lane == 0)
      beta[row] = 1.f / (1.f + expf(-ToFloat(static_cast<const T*>(in.b[p])[src])));
  }
}

template <int KI>
struct Step {
  float q[KI], k[KI], d[KI], v[kColsPerWarp], b;
};

template <typename T, int KI>
__device__ __forceinline__ void LoadStep(Step<KI>& st, const float* qn, const float* kn,
                                         const float* decay, const T* vh, const float* beta,
                                         int64_t row, int dk, int dv, int col0, int lane) {
#pragma unroll
  for (int m = 0; m < KI; ++m) {
    const int i = lane + 32 * m;
    st.q[m] = i < dk ? qn[row * dk + i] : 0.f;
    st.k[m] = i < dk ? kn[row * dk + i] : 0.f;
    st.d[m] = i < dk ? decay[row * dk + i] : 1.f;
  }
#pragma unroll
  for (int c = 0; c < kColsPerWarp; ++c)
    st.v[c] = col0 + c < dv ? ToFloat(vh[row * dv + col0 + c]) : 0.f;
  st.b = beta[row];
}

// Block (a, cb): owned head a (h = c + a * CP) for state columns cb*16 .. cb*16+15. Output row t
// belongs to CP position t / S, i.e. world ranks (t / S) * TP + j for j < TP: with TP = 1 it is
// stored into that rank's output, else as an fp32 partial into slot `tp_slot` of each partner's
// workspace ([TP][S][H][DV]).
template <typename T, int KI>
__global__ void __launch_bounds__(kWarps * 32)
    Recurrence(const float* qn, const float* kn, const float* decay, const T* vh,
               const float* beta, Dest dest, int c, int cp, int tp, int tp_slot, int64_t s,
               int64_t heads, int dk, int dv) {
  const int64_t col_blocks = (dv + kColsPerBlock - 1) / kColsPerBlock;
  const int64_t a = blockIdx.x / col_blocks, h = c + a * cp, total = cp * s;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int col0 = static_cast<int>(blockIdx.x % col_blocks) * kColsPerBlock + warp * kColsPerWarp;
  if (col0 >= dv || h >= heads) return;
  float m[KI][kColsPerWarp];
#pragma unroll
  for (int i = 0; i < KI; ++i)
#pragma unroll
    for (int cc = 0; cc < kColsPerWarp; ++cc) m[i][cc] = 0.f;
  Step<KI> cur, next;
  LoadStep<T, KI>(cur, qn, kn, decay, vh, beta, a * total, dk, dv, col0, lane);
  next = cur;
  for (int64_t t = 0; t < total; ++t) {
    if (t + 1 < total)
      LoadStep<T, KI>(next, qn, kn, decay, vh, beta, a * total + t + 1, dk, dv, col0, lane);
    float proj[kColsPerWarp];
#pragma unroll
    for (int cc = 0; cc < kColsPerWarp; ++cc) {
      proj[cc] = 0.f;
#pragma unroll
      for (int i = 0; i < KI; ++i) {
        m[i][cc] *= cur.d[i];
        proj[cc] += cur.k[i] * m[i][cc];
      }
    }
#pragma unroll
    for (int cc = 0; cc < kColsPerWarp; ++cc) proj[cc] = WarpSum(proj[cc]);
    float out[kColsPerWarp];
#pragma unroll
    for (int cc = 0; cc < kColsPerWarp; ++cc) {
      const float u = (cur.v[cc] - proj[cc]) * cur.b;
      out[cc] = 0.f;
#pragma unroll
      for (int i = 0; i < KI; ++i) {
        m[i][cc] += cur.k[i] * u;
        out[cc] += cur.q[i] * m[i][cc];
      }
    }
#pragma unroll
    for (int cc = 0; cc < kColsPerWarp; ++cc) out[cc] = WarpSum(out[cc]);
    if (lane < kColsPerWarp && col0 + lane < dv) {
      float mine = out[0];
#pragma unroll
      for (int cc = 1; cc < kColsPerWarp; ++cc)
        if (lane == cc) mine = out[cc];
      const int pos = static_cast<int>(t / s);
      const int64_t e = ((t % s) * heads + h) * dv + col0 + lane;
      if (tp == 1) {
        static_cast<T*>(dest.o[pos])[e] = FromFloat<T>(mine);
      } else {
        for (int j = 0; j < tp; ++j)
          static_cast<float*>(dest.ws[pos * tp + j])[tp_slot * s * heads * dv + e] = mine;
      }
    }
    cur = next;
  }
  __threadfence_system();  // the end barrier publishes these stores to their ranks
}

// o = the sum of the TP group's fp32 partials ([TP][n]).
template <typename T>
__global__ void __launch_bounds__(kThreads) SumPartials(const float* partials, T* o, int tp,
                                                        int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)kThreads + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * kThreads) {
    float sum = 0.f;
    for (int j = 0; j < tp; ++j) sum += partials[j * n + i];
    o[i] = FromFloat<T>(sum);
  }
}

struct State {
  uint32_t* epochs;  // [0]: start barrier, [1]: end barrier
};

char* Align(char* p) {
  return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + 255) & ~uintptr_t{255});
}

template <typename T, int KI>
int LaunchRecurrence(kf_ctx* ctx, const float* qn, const float* kn, const float* decay,
                     const T* vh, const float* beta, const Dest& dest, int c, int cp, int tp,
                     int tp_slot, int64_t owned, int64_t s, int64_t heads, int dk, int dv) {
  const int64_t blocks = owned * ((dv + kColsPerBlock - 1) / kColsPerBlock);
  Recurrence<T, KI><<<static_cast<unsigned>(blocks), kWarps * 32, 0, ctx->stream>>>(
      qn, kn, decay, vh, beta, dest, c, cp, tp, tp_slot, s, heads, dk, dv);
  return cudaGetLastError() != cudaSuccess;
}

template <typename T>
int Run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const char* names[5] = {"q", "k", "g", "v", "beta"};
  const kf_tensor* in[5];
  for (int i = 0; i < 5; ++i)
    if (!(in[i] = kf_input(ctx, names[i]))) return 1;
  const kf_tensor* a_log = kf_input(ctx, "a_log");
  const kf_tensor* dt_bias = kf_input(ctx, "dt_bias");
  const kf_tensor* o = kf_output(ctx, "o");
  const int tp_idx = kf_group_index(ctx, "tp"), cp_idx = kf_group_index(ctx, "cp");
  if (!st || !a_log || !dt_bias || !o || tp_idx < 0 || cp_idx < 0 || in[0]->ndim != 3 ||
      in[3]->ndim != 3)
    return 1;
  const kf_group& cpg = ctx->groups[cp_idx];
  const int world = ctx->world_size, tp = ctx->groups[tp_idx].size, cp = cpg.size;
  const int c = cpg.rank, tp_slot = ctx->rank % tp;  // CP group r % TP is this rank's TP slot
  const int64_t s = in[0]->shape[0], heads = in[0]->shape[1], dk = in[0]->shape[2];
  const int64_t dv = in[3]->shape[2], total = cp * s, owned = (heads + cp - 1) / cp;
  const int64_t rows = owned * total, partial_n = s * heads * dv;
  if (dk > 256 || a_log->numel != heads) return 1;

  // Workspace: the fp32 partials first (the same offset on every rank), then the pulled heads.
  char* base = static_cast<char*>(ctx->workspace.data);
  float* partials = reinterpret_cast<float*>(base);
  char* p = tp > 1 ? reinterpret_cast<char*>(partials + tp * partial_n) : base;
  float* qn = reinterpret_cast<float*>(Align(p));
  float* kn = reinterpret_cast<float*>(Align(reinterpret_cast<char*>(qn + rows * dk)));
  float* decay = reinterpret_cast<float*>(Align(reinterpret_cast<char*>(kn + rows * dk)));
  T* vh = reinterpret_cast<T*>(Align(reinterpret_cast<char*>(decay + rows * dk)));
  float* beta = reinterpret_cast<float*>(Align(reinterpret_cast<char*>(vh + rows * dv)));
  if (reinterpret_cast<char*>(beta + rows) > base + ctx->workspace.nbytes) return 1;

  CpInputs cpin{};
  for (int g = 0; g < cp; ++g) {
    const int r = cpg.ranks[g];
    cpin.q[g] = in[0]->peers[r];
    cpin.k[g] = in[1]->peers[r];
    cpin.g[g] = in[2]->peers[r];
    cpin.v[g] = in[3]->peers[r];
    cpin.b[g] = in[4]->peers[r];
  }
  Dest dest{};
  for (int r = 0; r < world; ++r) {
    dest.o[r] = o->peers[r];
    dest.ws[r] = ctx->workspace.peers[r];
  }

  // Inputs are in place on every rank and nobody still reads last call's partials.
  Barrier<<<1, 32, 0, ctx->stream>>>(ctx->signal_pad, ctx->rank, world, 0, st->epochs);
  if (cudaGetLastError() != cudaSuccess) return 1;
  const int64_t want = (rows + kPullWarps - 1) / kPullWarps;
  const int pull_blocks = static_cast<int>(want < 2048 ? (want > 0 ? want : 1) : 2048);
  Pull<T><<<pull_blocks, kPullWarps * 32, 0, ctx->stream>>>(
      cpin, static_cast<const T*>(a_log->data), static_cast<const T*>(dt_bias->data), qn, kn,
      decay, vh, beta, c, cp, owned, s, heads, static_cast<int>(dk), static_cast<int>(dv));
  if (cudaGetLastError() != cudaSuccess) return 1;

  const int kdk = static_cast<int>(dk), kdv = static_cast<int>(dv);
  int rc;
  if (dk <= 32)
    rc = LaunchRecurrence<T, 1>(ctx, qn, kn, decay, vh, beta, dest, c, cp, tp, tp_slot, owned, s,
                                heads, kdk, kdv);
  else if (dk <= 64)
    rc = LaunchRecurrence<T, 2>(ctx, qn, kn, decay, vh, beta, dest, c, cp, tp, tp_slot, owned, s,
                                heads, kdk, kdv);
  else if (dk <= 128)
    rc = LaunchRecurrence<T, 4>(ctx, qn, kn, decay, vh, beta, dest, c, cp, tp, tp_slot, owned, s,
                                heads, kdk, kdv);
  else
    rc = LaunchRecurrence<T, 8>(ctx, qn, kn, decay, vh, beta, dest, c, cp, tp, tp_slot, owned, s,
                                heads, kdk, kdv);
  if (rc != 0) return 1;

  // Every rank's stores into this rank's output or partials are done.
  Barrier<<<1, 32, 0, ctx->stream>>>(ctx->signal_pad, ctx->rank, world, world, st->epochs + 1);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (tp > 1) {
    const int64_t blocks = (partial_n + kThreads - 1) / kThreads;
    SumPartials<T><<<static_cast<int>(blocks < 2048 ? (blocks > 0 ? blocks : 1) : 2048), kThreads,
                     0, ctx->stream>>>(partials, static_cast<T*>(o->data), tp, partial_n);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  return 0;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  State* st = new State;
  if (cudaMalloc(&st->epochs, 2 * sizeof(uint32_t)) != cudaSuccess) {
    delete st;
    return 1;
  }
  if (cudaMemset(st->epochs, 0, 2 * sizeof(uint32_t)) != cudaSuccess) return 1;
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  switch (ctx->inputs[0].dtype) {
    case KF_BF16:
      return Run<__nv_bfloat16>(ctx);
    case KF_F32:
      return Run<float>(ctx);
    default:
      return 2;
  }
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (!st) return 0;
  cudaFree(st->epochs);
  delete st;
  ctx->user = nullptr;
  return 0;
}
