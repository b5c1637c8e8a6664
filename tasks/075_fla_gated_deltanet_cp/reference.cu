// Gated DeltaNet context-parallel baseline, as the upstream module runs it: five harness
// all-to-alls move q, k, v, gate and beta from sequence shards to head shards (a pack kernel
// first puts each destination's heads together), a per-head recurrent kernel runs the gated delta
// rule over the whole sequence with its fp32 state in registers, and one all-to-all (plus an
// unpack) brings the output back to sequence shards.
#include <cuda_bf16.h>

#include <cstdint>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = 4;        // recurrence: warps per block
constexpr int kColsPerWarp = 4;  // state columns (of DV) a warp owns
constexpr int kColsPerBlock = kWarps * kColsPerWarp;

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

// x [S, W*HL, D] -> send [W][S][HL][D]: block p of the send buffer holds rank p's heads.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    PackHeads(const T* x, T* send, int world, int64_t s, int64_t hl, int64_t d) {
  const int64_t n = world * s * hl * d;
  for (int64_t i = blockIdx.x * (int64_t)kThreads + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * kThreads) {
    const int64_t e = i % d, rest = i / d;
    const int64_t h = rest % hl, si = (rest / hl) % s, p = rest / (hl * s);
    send[i] = x[(si * world * hl + p * hl + h) * d + e];
  }
}

// recv [W][S][HL][D] (block p from rank p) -> out [S, W*HL, D].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    UnpackHeads(const T* recv, T* out, int world, int64_t s, int64_t hl, int64_t d) {
  const int64_t n = world * s * hl * d;
  for (int64_t i = blockIdx.x * (int64_t)kThreads + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * kThreads) {
    const int64_t e = i % d, rest = i / d;
    const int64_t h = rest % hl, si = (rest / hl) % s, p = rest / (hl * s);
    out[(si * world * hl + p * hl + h) * d + e] = recv[i];
  }
}

// One step's inputs for a warp: its lanes' rows of q and k, its columns of v, gate and beta.
template <int KI>
struct Step {
  float q[KI], k[KI], v[kColsPerWarp], g, b;
};

template <typename T, int KI>
__device__ __forceinline__ void LoadStep(Step<KI>& st, const T* q, const T* k, const T* v,
                                         const T* g, const T* b, int64_t t, int64_t hl, int64_t h,
                                         int dk, int dv, int col0, int lane) {
  const int64_t row = t * hl + h;
#pragma unroll
  for (int m = 0; m < KI; ++m) {
    const int i = lane + 32 * m;
    st.q[m] = i < dk ? ToFloat(q[row * dk + i]) : 0.f;
    st.k[m] = i < dk ? ToFloat(k[row * dk + i]) : 0.f;
  }
#pragma unroll
  for (int c = 0; c < kColsPerWarp; ++c)
    st.v[c] = col0 + c < dv ? ToFloat(v[row * dv + col0 + c]) : 0.f;
  st.g = ToFloat(g[row]);
  st.b = ToFloat(b[row]);
}

// q, k [T][HL][DK], v, o [T][HL][DV], g, b [T][HL]; a_log, dt_bias [HL]. Columns of the state are
// independent, so block (h, cb) runs head h's recurrence for columns cb*16 .. cb*16+15: warp w owns
// 4 of them, lane l holds rows l, l+32, .. of each, and the DK dot products are warp sums.
template <typename T, int KI>
__global__ void __launch_bounds__(kWarps * 32)
    Recurrence(const T* q, const T* k, const T* v, const T* g, const T* b, const T* a_log,
               const T* dt_bias, T* o, int64_t total, int64_t hl, int dk, int dv) {
  const int64_t col_blocks = (dv + kColsPerBlock - 1) / kColsPerBlock;
  const int64_t h = blockIdx.x / col_blocks;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int col0 = static_cast<int>(blockIdx.x % col_blocks) * kColsPerBlock + warp * kColsPerWarp;
  if (col0 >= dv) return;  // no block-wide synchronisation below
  const float a = expf(ToFloat(a_log[h])), dtb = ToFloat(dt_bias[h]);
  const float scale = rsqrtf(static_cast<float>(dk));
  float m[KI][kColsPerWarp];
#pragma unroll
  for (int i = 0; i < KI; ++i)
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) m[i][c] = 0.f;
  Step<KI> cur, next;
  LoadStep<T, KI>(cur, q, k, v, g, b, 0, hl, h, dk, dv, col0, lane);
  for (int64_t t = 0; t < total; ++t) {
    if (t + 1 < total) LoadStep<T, KI>(next, q, k, v, g, b, t + 1, hl, h, dk, dv, col0, lane);
    float qq = 0.f, kk = 0.f;
#pragma unroll
    for (int i = 0; i < KI; ++i) {
      qq += cur.q[i] * cur.q[i];
      kk += cur.k[i] * cur.k[i];
    }
    qq = WarpSum(qq);
    kk = WarpSum(kk);
    const float qs = scale / fmaxf(sqrtf(qq), 1e-6f), ks = 1.f / fmaxf(sqrtf(kk), 1e-6f);
    const float x = cur.g + dtb;
    const float decay = expf(-a * (x > 20.f ? x : log1pf(expf(x))));
    float proj[kColsPerWarp];
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) {
      proj[c] = 0.f;
#pragma unroll
      for (int i = 0; i < KI; ++i) {
        m[i][c] *= decay;
        proj[c] += cur.k[i] * m[i][c];
      }
    }
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) proj[c] = WarpSum(proj[c]);
    float out[kColsPerWarp];
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) {
      const float u = (cur.v[c] - proj[c] * ks) * cur.b * ks;  // kn = k * ks
      out[c] = 0.f;
#pragma unroll
      for (int i = 0; i < KI; ++i) {
        m[i][c] += cur.k[i] * u;
        out[c] += cur.q[i] * m[i][c];
      }
    }
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) out[c] = WarpSum(out[c]);
    if (lane < kColsPerWarp && col0 + lane < dv) {
      float mine = out[0];
#pragma unroll
      for (int c = 1; c < kColsPerWarp; ++c)
        if (lane == c) mine = out[c];
      o[(t * hl + h) * dv + col0 + lane] = FromFloat<T>(mine * qs);
    }
    cur = next;
  }
}

int GridFor(int64_t n) {
  const int64_t want = (n + kThreads - 1) / kThreads;
  return static_cast<int>(want < 4096 ? (want > 0 ? want : 1) : 4096);
}

char* Align(char* p) {
  return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + 255) & ~uintptr_t{255});
}

template <typename T, int KI>
int LaunchRecurrence(kf_ctx* ctx, const T* const* heads, const T* a_log, const T* dt_bias, T* o,
                     int64_t total, int64_t hl, int dk, int dv) {
  const int64_t blocks = hl * ((dv + kColsPerBlock - 1) / kColsPerBlock);
  Recurrence<T, KI><<<static_cast<unsigned>(blocks), kWarps * 32, 0, ctx->stream>>>(
      heads[0], heads[1], heads[2], heads[3], heads[4], a_log, dt_bias, o, total, hl, dk, dv);
  return cudaGetLastError() != cudaSuccess;
}

template <typename T>
int Run(kf_ctx* ctx) {
  const char* names[5] = {"q", "k", "v", "gate", "beta"};
  const kf_tensor* in[5];
  for (int i = 0; i < 5; ++i)
    if (!(in[i] = kf_input(ctx, names[i]))) return 1;
  const kf_tensor* a_log = kf_input(ctx, "a_log");
  const kf_tensor* dt_bias = kf_input(ctx, "dt_bias");
  kf_tensor* o = kf_output(ctx, "o");
  if (!a_log || !dt_bias || !o || in[0]->ndim != 3 || in[2]->ndim != 3) return 1;
  const int world = ctx->world_size;
  const int64_t s = in[0]->shape[0], hl = in[0]->shape[1] / world;
  const int64_t dk = in[0]->shape[2], dv = in[2]->shape[2], total = world * s;
  if (hl * world != in[0]->shape[1] || dk > 256 || a_log->numel != hl) return 1;
  const int64_t dims[5] = {dk, dk, dv, 1, 1};

  // Workspace: the five inputs in head layout, a pack buffer, the output in head layout and its
  // receive buffer.
  char* p = static_cast<char*>(ctx->workspace.data);
  char* const end = p + ctx->workspace.nbytes;
  T* heads[5];
  for (int i = 0; i < 5; ++i) {
    heads[i] = reinterpret_cast<T*>(Align(p));
    p = reinterpret_cast<char*>(heads[i] + total * hl * dims[i]);
  }
  T* stage = reinterpret_cast<T*>(Align(p));
  p = reinterpret_cast<char*>(stage + total * hl * (dk > dv ? dk : dv));
  T* o_heads = reinterpret_cast<T*>(Align(p));
  p = reinterpret_cast<char*>(o_heads + total * hl * dv);
  T* o_recv = reinterpret_cast<T*>(Align(p));
  p = reinterpret_cast<char*>(o_recv + total * hl * dv);
  if (p > end) return 1;

  // Sequence shards -> head shards. The send buffer is reused: the stream orders each pack after
  // the previous all-to-all has read it.
  for (int i = 0; i < 5; ++i) {
    const int64_t n = total * hl * dims[i];
    PackHeads<T><<<GridFor(n), kThreads, 0, ctx->stream>>>(static_cast<const T*>(in[i]->data),
                                                           stage, world, s, hl, dims[i]);
    if (cudaGetLastError() != cudaSuccess) return 1;
    if (kf_all_to_all(ctx, stage, heads[i], static_cast<size_t>(s * hl * dims[i]), in[i]->dtype) !=
        0)
      return 1;
  }

  const T* const_heads[5] = {heads[0], heads[1], heads[2], heads[3], heads[4]};
  const T* al = static_cast<const T*>(a_log->data);
  const T* db = static_cast<const T*>(dt_bias->data);
  const int kdk = static_cast<int>(dk), kdv = static_cast<int>(dv);
  int rc;
  if (dk <= 32)
    rc = LaunchRecurrence<T, 1>(ctx, const_heads, al, db, o_heads, total, hl, kdk, kdv);
  else if (dk <= 64)
    rc = LaunchRecurrence<T, 2>(ctx, const_heads, al, db, o_heads, total, hl, kdk, kdv);
  else if (dk <= 128)
    rc = LaunchRecurrence<T, 4>(ctx, const_heads, al, db, o_heads, total, hl, kdk, kdv);
  else
    rc = LaunchRecurrence<T, 8>(ctx, const_heads, al, db, o_heads, total, hl, kdk, kdv);
  if (rc != 0) return 1;

  // Head shards -> sequence shards: o_heads [T][HL][DV] is already [W][S][HL][DV], block p for
  // rank p.
  if (kf_all_to_all(ctx, o_heads, o_recv, static_cast<size_t>(s * hl * dv), o->dtype) != 0)
    return 1;
  UnpackHeads<T><<<GridFor(total * hl * dv), kThreads, 0, ctx->stream>>>(
      o_recv, static_cast<T*>(o->data), world, s, hl, dv);
  return cudaGetLastError() != cudaSuccess;
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
