// Kimi Delta Attention CP x TP baseline, as the upstream module runs it: five harness all-gathers
// over the CP group give every rank its group's whole sequence of q, k, v, g and beta; a recurrent
// kernel runs every head over the whole sequence (each CP rank the same work, as upstream) with
// its fp32 state in registers and writes the outputs at this rank's own positions; a harness
// all-reduce over the TP group sums the partners' outputs (upstream reduces the whole sequence
// and keeps its slice: the same values).
#include <cuda_bf16.h>

#include <cstdint>

#include "kforge/kernel.h"

namespace {

constexpr int kWarps = 4;        // warps per block
constexpr int kColsPerWarp = 4;  // state columns (of DV) a warp owns
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

// One step's inputs for a warp: its lanes' rows of q, k and g, its columns of v, and beta.
template <int KI>
struct Step {
  float q[KI], k[KI], g[KI], v[kColsPerWarp], b;
};

template <typename T, int KI>
__device__ __forceinline__ void LoadStep(Step<KI>& st, const T* q, const T* k, const T* g,
                                         const T* v, const T* b, int64_t t, int64_t heads,
                                         int64_t h, int dk, int dv, int col0, int lane) {
  const int64_t row = t * heads + h;
#pragma unroll
  for (int m = 0; m < KI; ++m) {
    const int i = lane + 32 * m;
    st.q[m] = i < dk ? ToFloat(q[row * dk + i]) : 0.f;
    st.k[m] = i < dk ? ToFloat(k[row * dk + i]) : 0.f;
    st.g[m] = i < dk ? ToFloat(g[row * dk + i]) : 0.f;
  }
#pragma unroll
  for (int c = 0; c < kColsPerWarp; ++c)
    st.v[c] = col0 + c < dv ? ToFloat(v[row * dv + col0 + c]) : 0.f;
  st.b = ToFloat(b[row]);
}

// q, k, g [T][H][DK], v [T][H][DV], b [T][H] (the gathered sequence); a_log [H], dt_bias [H*DK].
// Columns of the state are independent: block (h, cb) runs head h for columns cb*16 .. cb*16+15,
// warp w owns 4 of them and lane l rows l, l+32, .. of each; the DK dot products are warp sums.
// Rows t in [first, first + S) go to out [S][H][DV].
template <typename T, int KI>
__global__ void __launch_bounds__(kWarps * 32)
    Recurrence(const T* q, const T* k, const T* g, const T* v, const T* b, const T* a_log,
               const T* dt_bias, T* out, int64_t total, int64_t first, int64_t s, int64_t heads,
               int dk, int dv) {
  const int64_t col_blocks = (dv + kColsPerBlock - 1) / kColsPerBlock;
  const int64_t h = blockIdx.x / col_blocks;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int col0 = static_cast<int>(blockIdx.x % col_blocks) * kColsPerBlock + warp * kColsPerWarp;
  if (col0 >= dv) return;  // no block-wide synchronisation below
  const float a = expf(ToFloat(a_log[h]));
  const float scale = rsqrtf(static_cast<float>(dk));
  float dtb[KI], m[KI][kColsPerWarp];
#pragma unroll
  for (int i = 0; i < KI; ++i) {
    const int row = lane + 32 * i;
    dtb[i] = row < dk ? ToFloat(dt_bias[h * dk + row]) : 0.f;
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) m[i][c] = 0.f;
  }
  Step<KI> cur, next;
  LoadStep<T, KI>(cur, q, k, g, v, b, 0, heads, h, dk, dv, col0, lane);
  next = cur;
  for (int64_t t = 0; t < total; ++t) {
    if (t + 1 < total) LoadStep<T, KI>(next, q, k, g, v, b, t + 1, heads, h, dk, dv, col0, lane);
    float qq = 0.f, kk = 0.f;
#pragma unroll
    for (int i = 0; i < KI; ++i) {
      qq += cur.q[i] * cur.q[i];
      kk += cur.k[i] * cur.k[i];
    }
    qq = WarpSum(qq);
    kk = WarpSum(kk);
    const float qs = scale / fmaxf(sqrtf(qq), 1e-12f), ks = 1.f / fmaxf(sqrtf(kk), 1e-12f);
    const float beta = 1.f / (1.f + expf(-cur.b));
    float decay[KI];
#pragma unroll
    for (int i = 0; i < KI; ++i)
      decay[i] = expf(kLowerBound / (1.f + expf(-a * (cur.g[i] + dtb[i]))));
    float proj[kColsPerWarp];
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) {
      proj[c] = 0.f;
#pragma unroll
      for (int i = 0; i < KI; ++i) {
        m[i][c] *= decay[i];
        proj[c] += cur.k[i] * m[i][c];
      }
    }
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) proj[c] = WarpSum(proj[c]);
    float o[kColsPerWarp];
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) {
      const float u = (cur.v[c] - proj[c] * ks) * beta * ks;  // kn = k * ks
      o[c] = 0.f;
#pragma unroll
      for (int i = 0; i < KI; ++i) {
        m[i][c] += cur.k[i] * u;
        o[c] += cur.q[i] * m[i][c];
      }
    }
    if (t >= first && t < first + s) {  // the same branch for the whole warp
#pragma unroll
      for (int c = 0; c < kColsPerWarp; ++c) o[c] = WarpSum(o[c]);
      if (lane < kColsPerWarp && col0 + lane < dv) {
        float mine = o[0];
#pragma unroll
        for (int c = 1; c < kColsPerWarp; ++c)
          if (lane == c) mine = o[c];
        out[((t - first) * heads + h) * dv + col0 + lane] = FromFloat<T>(mine * qs);
      }
    }
    cur = next;
  }
}

char* Align(char* p) {
  return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + 255) & ~uintptr_t{255});
}

template <typename T, int KI>
int LaunchRecurrence(kf_ctx* ctx, const T* const* full, const T* a_log, const T* dt_bias, T* out,
                     int64_t total, int64_t first, int64_t s, int64_t heads, int dk, int dv) {
  const int64_t blocks = heads * ((dv + kColsPerBlock - 1) / kColsPerBlock);
  Recurrence<T, KI><<<static_cast<unsigned>(blocks), kWarps * 32, 0, ctx->stream>>>(
      full[0], full[1], full[2], full[3], full[4], a_log, dt_bias, out, total, first, s, heads, dk,
      dv);
  return cudaGetLastError() != cudaSuccess;
}

template <typename T>
int Run(kf_ctx* ctx) {
  const char* names[5] = {"q", "k", "g", "v", "beta"};
  const kf_tensor* in[5];
  for (int i = 0; i < 5; ++i)
    if (!(in[i] = kf_input(ctx, names[i]))) return 1;
  const kf_tensor* a_log = kf_input(ctx, "a_log");
  const kf_tensor* dt_bias = kf_input(ctx, "dt_bias");
  kf_tensor* o = kf_output(ctx, "o");
  const int tp_idx = kf_group_index(ctx, "tp"), cp_idx = kf_group_index(ctx, "cp");
  if (!a_log || !dt_bias || !o || tp_idx < 0 || cp_idx < 0 || in[0]->ndim != 3 || in[3]->ndim != 3)
    return 1;
  const kf_group& tp = ctx->groups[tp_idx];
  const kf_group& cp = ctx->groups[cp_idx];
  const int64_t s = in[0]->shape[0], heads = in[0]->shape[1], dk = in[0]->shape[2];
  const int64_t dv = in[3]->shape[2], total = cp.size * s, first = cp.rank * s;
  if (dk > 256 || a_log->numel != heads) return 1;
  const int64_t dims[5] = {dk, dk, dk, dv, 1};

  // Workspace: the CP group's whole sequence of each input ([CP][S][H][D] = [T][H][D]), then this
  // rank's output slice before the TP sum.
  char* p = static_cast<char*>(ctx->workspace.data);
  T* full[5];
  for (int i = 0; i < 5; ++i) {
    full[i] = reinterpret_cast<T*>(Align(p));
    p = reinterpret_cast<char*>(full[i] + total * heads * dims[i]);
  }
  T* partial = tp.size > 1 ? reinterpret_cast<T*>(Align(p)) : static_cast<T*>(o->data);
  if (tp.size > 1) p = reinterpret_cast<char*>(partial + s * heads * dv);
  if (p > static_cast<char*>(ctx->workspace.data) + ctx->workspace.nbytes) return 1;

  for (int i = 0; i < 5; ++i)
    if (kf_group_all_gather(ctx, cp_idx, in[i]->data, full[i],
                            static_cast<size_t>(s * heads * dims[i]), in[i]->dtype) != 0)
      return 1;

  const T* const_full[5] = {full[0], full[1], full[2], full[3], full[4]};
  const T* al = static_cast<const T*>(a_log->data);
  const T* db = static_cast<const T*>(dt_bias->data);
  const int kdk = static_cast<int>(dk), kdv = static_cast<int>(dv);
  int rc;
  if (dk <= 32)
    rc = LaunchRecurrence<T, 1>(ctx, const_full, al, db, partial, total, first, s, heads, kdk, kdv);
  else if (dk <= 64)
    rc = LaunchRecurrence<T, 2>(ctx, const_full, al, db, partial, total, first, s, heads, kdk, kdv);
  else if (dk <= 128)
    rc = LaunchRecurrence<T, 4>(ctx, const_full, al, db, partial, total, first, s, heads, kdk, kdv);
  else
    rc = LaunchRecurrence<T, 8>(ctx, const_full, al, db, partial, total, first, s, heads, kdk, kdv);
  if (rc != 0) return 1;

  if (tp.size > 1 &&
      kf_group_all_reduce(ctx, tp_idx, partial, o->data, static_cast<size_t>(s * heads * dv),
                          o->dtype, KF_SUM) != 0)
    return 1;
  return 0;
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

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

extern "C" int kf_teardown(kf_ctx*) { return 0; }
