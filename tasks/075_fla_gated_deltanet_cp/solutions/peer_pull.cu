// Gated DeltaNet context parallelism without collectives: after a start barrier, one kernel pulls
// this rank's heads of q, k, v, gate and beta for the whole sequence straight from the peers'
// input buffers, normalising q and k and turning gate into the decay on the way (so the serial
// loop only multiplies and adds); the recurrence then stores each output row directly into the
// output of the rank that holds that position, and an end barrier tells every rank its output is
// complete. Six all-to-alls, six pack/unpack passes and the per-step norms are gone.
#include <cuda_bf16.h>

#include <cstdint>

#include "kforge/kernel.h"

namespace {

constexpr int kPullWarps = 8;
constexpr int kWarps = 4;
constexpr int kColsPerWarp = 4;
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

struct Peers {
  const void* q[8];
  const void* k[8];
  const void* v[8];
  const void* g[8];
  const void* b[8];
};

// One warp per (position t, local head h): reads rank t / S's row of this rank's head h and writes
// qn * DK^-0.5 and kn (fp32, [T][HL][DK]), v ([T][HL][DV]), decay and beta (fp32, [T][HL]).
template <typename T>
__global__ void __launch_bounds__(kPullWarps * 32)
    Pull(Peers in, const T* a_log, const T* dt_bias, float* qn, float* kn, T* vh, float* decay,
         float* beta, int rank, int world, int64_t s, int64_t hl, int dk, int dv) {
  const int lane = threadIdx.x & 31;
  const int64_t rows = world * s * hl, heads = world * hl;
  for (int64_t row = blockIdx.x * (int64_t)kPullWarps + (threadIdx.x >> 5); row < rows;
       row += (int64_t)gridDim.x * kPullWarps) {
    const int64_t t = row / hl, h = row % hl;
    const int p = static_cast<int>(t / s);
    const int64_t src = (t % s) * heads + rank * hl + h;  // row of rank p's [S, W*HL] tensors
    const T* q = static_cast<const T*>(in.q[p]) + src * dk;
    const T* k = static_cast<const T*>(in.k[p]) + src * dk;
    // Each remote element is read once: a lane keeps its (at most 8) elements of q and k.
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
    const float qs = rsqrtf(static_cast<float>(dk)) / fmaxf(sqrtf(qq), 1e-6f);
    const float ks = 1.f / fmaxf(sqrtf(kk), 1e-6f);
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      const int i = lane + 32 * m;
      if (i < dk) {
        qn[row * dk + i] = qr[m] * qs;
        kn[row * dk + i] = kr[m] * ks;
      }
    }
    const T* v = static_cast<const T*>(in.v[p]) + src * dv;
    for (int j = lane; j < dv; j += 32) vh[row * dv + j] = v[j];
    if (lane == 0) {
      const float x = ToFloat(static_cast<const T*>(in.g[p])[src]) + ToFloat(dt_bias[h]);
      decay[row] = expf(-expf(ToFloat(a_log[h])) * (x > 20.f ? x : log1pf(expf(x))));
      beta[row] = ToFloat(static_cast<const T*>(in.b[p])[src]);
    }
  }
}

template <int KI>
struct Step {
  float q[KI], k[KI], v[kColsPerWarp], d, b;
};

template <typename T, int KI>
__device__ __forceinline__ void LoadStep(Step<KI>& st, const float* qn, const float* kn,
                                         const T* vh, const float* decay, const float* beta,
                                         int64_t row, int dk, int dv, int col0, int lane) {
#pragma unroll
  for (int m = 0; m < KI; ++m) {
    const int i = lane + 32 * m;
    st.q[m] = i < dk ? qn[row * dk + i] : 0.f;
    st.k[m] = i < dk ? kn[row * dk + i] : 0.f;
  }
#pragma unroll
  for (int c = 0; c < kColsPerWarp; ++c)
    st.v[c] = col0 + c < dv ? ToFloat(vh[row * dv + col0 + c]) : 0.f;
  st.d = decay[row];
  st.b = beta[row];
}

// Block (h, cb) runs head h for state columns cb*16 .. cb*16+15 (warp w: 4 of them; lane l: rows
// l, l+32, ..). Output row t goes to rank t / S.
template <typename T, int KI>
__global__ void __launch_bounds__(kWarps * 32)
    Recurrence(const float* qn, const float* kn, const T* vh, const float* decay,
               const float* beta, kf_tensor o, int rank, int world, int64_t s, int64_t hl, int dk,
               int dv) {
  const int64_t col_blocks = (dv + kColsPerBlock - 1) / kColsPerBlock;
  const int64_t h = blockIdx.x / col_blocks, total = world * s, heads = world * hl;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int col0 = static_cast<int>(blockIdx.x % col_blocks) * kColsPerBlock + warp * kColsPerWarp;
  if (col0 >= dv) return;
  float m[KI][kColsPerWarp];
#pragma unroll
  for (int i = 0; i < KI; ++i)
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) m[i][c] = 0.f;
  Step<KI> cur, next;
  LoadStep<T, KI>(cur, qn, kn, vh, decay, beta, h, dk, dv, col0, lane);
  next = cur;
  for (int64_t t = 0; t < total; ++t) {
    if (t + 1 < total)
      LoadStep<T, KI>(next, qn, kn, vh, decay, beta, (t + 1) * hl + h, dk, dv, col0, lane);
    float proj[kColsPerWarp];
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) {
      proj[c] = 0.f;
#pragma unroll
      for (int i = 0; i < KI; ++i) {
        m[i][c] *= cur.d;
        proj[c] += cur.k[i] * m[i][c];
      }
    }
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) proj[c] = WarpSum(proj[c]);
    float out[kColsPerWarp];
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) {
      const float u = (cur.v[c] - proj[c]) * cur.b;
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
      const int p = static_cast<int>(t / s);
      T* dst = static_cast<T*>(o.peers[p]);
      dst[((t % s) * heads + rank * hl + h) * dv + col0 + lane] = FromFloat<T>(mine);
    }
    cur = next;
  }
  __threadfence_system();  // the end barrier publishes these stores to their ranks
}

struct State {
  uint32_t* epochs;  // [0]: start barrier, [1]: end barrier
};

char* Align(char* p) {
  return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + 255) & ~uintptr_t{255});
}

template <typename T, int KI>
int LaunchRecurrence(kf_ctx* ctx, const float* qn, const float* kn, const T* vh,
                     const float* decay, const float* beta, const kf_tensor& o, int64_t s,
                     int64_t hl, int dk, int dv) {
  const int64_t blocks = hl * ((dv + kColsPerBlock - 1) / kColsPerBlock);
  Recurrence<T, KI><<<static_cast<unsigned>(blocks), kWarps * 32, 0, ctx->stream>>>(
      qn, kn, vh, decay, beta, o, ctx->rank, ctx->world_size, s, hl, dk, dv);
  return cudaGetLastError() != cudaSuccess;
}

template <typename T>
int Run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor* q = kf_input(ctx, "q");
  const kf_tensor* k = kf_input(ctx, "k");
  const kf_tensor* v = kf_input(ctx, "v");
  const kf_tensor* g = kf_input(ctx, "gate");
  const kf_tensor* b = kf_input(ctx, "beta");
  const kf_tensor* a_log = kf_input(ctx, "a_log");
  const kf_tensor* dt_bias = kf_input(ctx, "dt_bias");
  const kf_tensor* o = kf_output(ctx, "o");
  if (!st || !q || !k || !v || !g || !b || !a_log || !dt_bias || !o || q->ndim != 3 ||
      v->ndim != 3)
    return 1;
  const int world = ctx->world_size, rank = ctx->rank;
  const int64_t s = q->shape[0], hl = q->shape[1] / world, dk = q->shape[2], dv = v->shape[2];
  const int64_t rows = world * s * hl;
  if (world > 8 || hl * world != q->shape[1] || dk > 256 || a_log->numel != hl) return 1;

  char* p = static_cast<char*>(ctx->workspace.data);
  float* qn = reinterpret_cast<float*>(Align(p));
  float* kn = reinterpret_cast<float*>(Align(reinterpret_cast<char*>(qn + rows * dk)));
  T* vh = reinterpret_cast<T*>(Align(reinterpret_cast<char*>(kn + rows * dk)));
  float* decay = reinterpret_cast<float*>(Align(reinterpret_cast<char*>(vh + rows * dv)));
  float* beta = reinterpret_cast<float*>(Align(reinterpret_cast<char*>(decay + rows)));
  if (reinterpret_cast<char*>(beta + rows) > p + ctx->workspace.nbytes) return 1;

  Peers peers{};
  for (int r = 0; r < world; ++r) {
    peers.q[r] = q->peers[r];
    peers.k[r] = k->peers[r];
    peers.v[r] = v->peers[r];
    peers.g[r] = g->peers[r];
    peers.b[r] = b->peers[r];
  }
  Barrier<<<1, 32, 0, ctx->stream>>>(ctx->signal_pad, rank, world, 0, st->epochs);
  if (cudaGetLastError() != cudaSuccess) return 1;
  const int64_t want = (rows + kPullWarps - 1) / kPullWarps;
  const int pull_blocks = static_cast<int>(want < 2048 ? want : 2048);
  Pull<T><<<pull_blocks, kPullWarps * 32, 0, ctx->stream>>>(
      peers, static_cast<const T*>(a_log->data), static_cast<const T*>(dt_bias->data), qn, kn, vh,
      decay, beta, rank, world, s, hl, static_cast<int>(dk), static_cast<int>(dv));
  if (cudaGetLastError() != cudaSuccess) return 1;

  const int kdk = static_cast<int>(dk), kdv = static_cast<int>(dv);
  int rc;
  if (dk <= 32)
    rc = LaunchRecurrence<T, 1>(ctx, qn, kn, vh, decay, beta, *o, s, hl, kdk, kdv);
  else if (dk <= 64)
    rc = LaunchRecurrence<T, 2>(ctx, qn, kn, vh, decay, beta, *o, s, hl, kdk, kdv);
  else if (dk <= 128)
    rc = LaunchRecurrence<T, 4>(ctx, qn, kn, vh, decay, beta, *o, s, hl, kdk, kdv);
  else
    rc = LaunchRecurrence<T, 8>(ctx, qn, kn, vh, decay, beta, *o, s, hl, kdk, kdv);
  if (rc != 0) return 1;

  // Every peer has finished writing this rank's output (and reading its inputs).
  Barrier<<<1, 32, 0, ctx->stream>>>(ctx->signal_pad, rank, world, world, st->epochs + 1);
  return cudaGetLastError() != cudaSuccess;
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
