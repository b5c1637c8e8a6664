// No all-to-alls, and half of the baseline's NVLink traffic. Every rank
// first forms u = x2 * v of its own sequence shard (all channels) in its
// symmetric workspace. After a barrier each rank reads its channels' rows of
// u straight from the ranks that hold each chunk (peer pointers), in global
// order, zero-padded to 2L, next to its zero-padded filter rows, so one
// batched cuFFT R2C plan transforms signals and filters together. The
// spectra are multiplied in place and one C2R gives the filter sums, which
// stay in the workspace (narrowed to the input dtype, the way PyTorch rounds
// the fftconv result). After a second barrier every rank pulls the filter
// sums of its two chunks from every channel owner and applies the gating
// where x1, x2 and v already are, y = x1 * (conv + bias * u), transposing
// into y[B, 2C, D] on the way. Only u goes out and the filter sums come back
// (the baseline moves x1, x2, v and y), and the pack, unpack, gating and
// transpose passes collapse into three kernels around the transforms.
//
// Barriers: one block whose thread p signals rank p's slot [rank] of the
// signal pad with an epoch that grows by one per barrier and waits for its
// own slot [p]. A peer reads this rank's u between the first and second
// barrier of a call and its filter sums between the second barrier and its
// own next first barrier; this rank rewrites u only after passing the second
// barrier and the sums only after the next first barrier, so no end barrier
// is needed.
#include <cuda_bf16.h>
#include <cufft.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

struct Dims {
  int64_t batch, d, c, dl, groups, gl, gd, lh, len, n, f;  // len = L, n = 2L, f = L + 1
  int world, rank;
};

__device__ __forceinline__ float ToF(float v) { return v; }
__device__ __forceinline__ float ToF(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T FromF(float v);
template <>
__device__ __forceinline__ float FromF<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromF<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}

// The kernels over [rows x cols] arrays stride the rows along y and the
// columns along x, so that no element pays a 64-bit division.
#define FOR_ROWS(row, rows) for (int64_t row = blockIdx.y; row < (rows); row += gridDim.y)
#define FOR_COLS(col, cols)                                                   \
  for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; \
       col < (cols); col += static_cast<int64_t>(gridDim.x) * blockDim.x)

__device__ inline int64_t Tid() {
  return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
}
__device__ inline int64_t Threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

struct Peers {
  const void* u[KF_MAX_RANKS];     // each rank's u = x2 * v of its shard, [B, D, 2C]
  const void* conv[KF_MAX_RANKS];  // each rank's filter sums, [B*Dl] rows of `conv_stride`
  uint32_t* pad[KF_MAX_RANKS];
  uint32_t* own_pad;
};

__global__ void Barrier(Peers p, uint32_t* epoch, int rank, int world) {
  const uint32_t e = *epoch + 1;
  if (threadIdx.x < world) {
    kf_signal(p.pad[threadIdx.x] + rank, e);
    kf_wait(p.own_pad + threadIdx.x, e);
  }
  __syncthreads();
  if (threadIdx.x == 0) *epoch = e;
}

// u = T(x2 * v) over this rank's whole shard.
template <typename T>
__global__ void Product(const T* __restrict__ x2, const T* __restrict__ v, T* __restrict__ u,
                        int64_t total) {
  for (int64_t e = Tid(); e < total; e += Threads()) u[e] = FromF<T>(ToF(x2[e]) * ToF(v[e]));
}

// Rows [0, B*Dl): u of local channel row (b, c) at global positions t < L,
// read from the rank holding t's chunk; zero up to 2L. Rows [B*Dl, B*Dl + Gl):
// this rank's filters, truncated to L taps (later ones reach no kept output)
// and zero-padded. Each thread handles V consecutive positions, which never
// straddle a chunk (C % V == 0): one 16-byte load of u when V = 16 / sizeof(T).
template <typename T, int V>
__global__ void Prepare(Peers p, const T* __restrict__ h, float* __restrict__ pad, Dims d) {
  const int64_t signal_rows = d.batch * d.dl, taps = d.lh < d.len ? d.lh : d.len;
  FOR_ROWS(row, signal_rows + d.gl) {
    const bool filter = row >= signal_rows;
    const T* filt = filter ? h + (d.rank * d.gl + row - signal_rows) * d.lh : h;
    const int64_t b = row / d.dl, c = row % d.dl;
    float* dst = pad + row * d.n;
    FOR_COLS(q, d.n / V) {
      const int64_t t0 = q * V;
      float out[V];
#pragma unroll
      for (int i = 0; i < V; ++i) out[i] = 0.f;
      if (filter) {
#pragma unroll
        for (int i = 0; i < V; ++i)
          if (t0 + i < taps) out[i] = ToF(filt[t0 + i]);
      } else if (t0 < d.len) {
        const int k = static_cast<int>(t0) / static_cast<int>(d.c);  // t0 < L fits an int
        const int64_t i0 = t0 - k * d.c;
        const bool second = k >= d.world;
        const int holder = second ? 2 * d.world - 1 - k : k;
        const int64_t at = (b * d.d + d.rank * d.dl + c) * 2 * d.c + (second ? d.c : 0) + i0;
        const T* src = static_cast<const T*>(p.u[holder]) + at;
        if constexpr (V * sizeof(T) == 16) {
          const uint4 raw = *reinterpret_cast<const uint4*>(src);
          const T* vals = reinterpret_cast<const T*>(&raw);
#pragma unroll
          for (int i = 0; i < V; ++i) out[i] = ToF(vals[i]);
        } else {
#pragma unroll
          for (int i = 0; i < V; ++i) out[i] = ToF(src[i]);
        }
      }
      if constexpr (V == 1) {
        dst[t0] = out[0];
      } else {
#pragma unroll
        for (int i = 0; i < V; i += 4)
          *reinterpret_cast<float4*>(dst + t0 + i) =
              make_float4(out[i], out[i + 1], out[i + 2], out[i + 3]);
      }
    }
  }
}

// spec[b*Dl + c][k] *= spec[B*Dl + c / GD][k] / 2L (the irfft's norm).
__global__ void Multiply(float2* __restrict__ spec, Dims d, float scale) {
  const int64_t signal_rows = d.batch * d.dl;
  FOR_ROWS(row, signal_rows) {
    float2* a = spec + row * d.f;
    const float2* w = spec + (signal_rows + (row % d.dl) / d.gd) * d.f;
    FOR_COLS(k, d.f) {
      const float2 x = a[k], y = w[k];
      a[k] = make_float2((x.x * y.x - x.y * y.y) * scale, (x.x * y.y + x.y * y.x) * scale);
    }
  }
}

// sums[b*Dl + c][t] = T(conv[b*Dl + c][t]) for t < L: half the bytes for the
// peers to pull when T is 16-bit.
template <typename T>
__global__ void Narrow(const float* __restrict__ conv, T* __restrict__ sums, Dims d) {
  FOR_ROWS(row, d.batch * d.dl) {
    FOR_COLS(t, d.len) sums[row * d.len + t] = FromF<T>(conv[row * d.n + t]);
  }
}

// y[b][j][q*Dl + c] = x1 * (S + bias * u) at this rank's position j, S rank
// q's filter sum of its channel c at the global position t(j). 32 x 32 tiles
// read along j (contiguous within a chunk, here and at the owner), written
// along the channels. S is T-rounded (S_T) or the owner's f32 C2R output.
template <typename T, typename S>
__global__ void Pull(Peers p, const T* __restrict__ x1, const T* __restrict__ u,
                     const T* __restrict__ bias, T* __restrict__ y, Dims d, int64_t conv_stride) {
  __shared__ T tile[32][33];
  const int64_t rows = 2 * d.c, b = blockIdx.z;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * 32;
  const int64_t ch0 = static_cast<int64_t>(blockIdx.y) * 32;
  for (int r = threadIdx.y; r < 32; r += blockDim.y) {
    const int64_t ch = ch0 + r, j = j0 + threadIdx.x;
    if (ch < d.d && j < rows) {
      const int64_t q = ch / d.dl, c = ch % d.dl;
      const int64_t t = j < d.c ? d.rank * d.c + j : (2 * d.world - 1 - d.rank) * d.c + (j - d.c);
      const float s = ToF(static_cast<const S*>(p.conv[q])[(b * d.dl + c) * conv_stride + t]);
      const int64_t at = (b * d.d + ch) * rows + j;
      tile[r][threadIdx.x] = FromF<T>(ToF(x1[at]) * (s + ToF(bias[ch]) * ToF(u[at])));
    }
  }
  __syncthreads();
  for (int r = threadIdx.y; r < 32; r += blockDim.y) {
    const int64_t j = j0 + r, ch = ch0 + threadIdx.x;
    if (ch < d.d && j < rows) y[(b * rows + j) * d.d + ch] = tile[threadIdx.x][r];
  }
}

// The plans run one after another on one stream, so they share one work area
// (the largest any of them needs) instead of one each: at the 128k-token bench
// size a work area is gigabytes.
enum PlanId { kFwd = 0, kInv, kPlans };

struct State {
  cufftHandle plans[kPlans] = {};
  bool made[kPlans] = {};
  void* work = nullptr;
  uint32_t* epoch = nullptr;  // barriers passed by this rank
};

int64_t Align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

int Blocks(int64_t total) {
  const int64_t want = (total + 255) / 256;
  return static_cast<int>(want < 1 ? 1 : (want > 16384 ? 16384 : want));
}

// At most 64 x 1024 blocks of 256 threads over a [rows x cols] array.
dim3 Grid(int64_t rows, int64_t cols) {
  const int64_t x = (cols + 255) / 256;
  return dim3(static_cast<unsigned>(x < 1 ? 1 : (x > 64 ? 64 : x)),
              static_cast<unsigned>(rows < 1 ? 1 : (rows > 1024 ? 1024 : rows)));
}

bool ReadDims(kf_ctx* ctx, Dims* d) {
  const kf_tensor* x1 = kf_input(ctx, "x1");
  const kf_tensor* h = kf_input(ctx, "h");
  const kf_tensor* y = kf_output(ctx, "y");
  if (x1 == nullptr || h == nullptr || y == nullptr || x1->ndim != 3 || h->ndim != 2) return false;
  d->world = ctx->world_size;
  d->rank = ctx->rank;
  d->batch = x1->shape[0];
  d->d = x1->shape[1];
  d->c = x1->shape[2] / 2;
  d->groups = h->shape[0];
  d->lh = h->shape[1];
  if (d->groups < 1 || d->d % d->groups != 0 || d->groups % d->world != 0) return false;
  d->dl = d->d / d->world;
  d->gl = d->groups / d->world;
  d->gd = d->d / d->groups;
  d->len = 2 * d->world * d->c;
  d->n = 2 * d->len;
  d->f = d->len + 1;
  return d->c >= 1 && y->shape[0] == d->batch && y->shape[1] == 2 * d->c && y->shape[2] == d->d;
}

bool MakePlan(State* st, PlanId which, int64_t n, int64_t batch, cufftType type, size_t* work) {
  if (cufftCreate(&st->plans[which]) != CUFFT_SUCCESS) return false;
  st->made[which] = true;
  if (cufftSetAutoAllocation(st->plans[which], 0) != CUFFT_SUCCESS) return false;
  int dims[1] = {static_cast<int>(n)};
  return cufftMakePlanMany(st->plans[which], 1, dims, nullptr, 1, 0, nullptr, 1, 0, type,
                           static_cast<int>(batch), work) == CUFFT_SUCCESS;
}

// Workspace: pad [(B*Dl + Gl) x 2L] f32 | spec [(B*Dl + Gl) x (L+1)] c64 |
// u [B x D x 2C] T | sums [B*Dl x L] T, at the same offsets on every rank.
struct Layout {
  int64_t spec, u, sums, end;
};

Layout Plan(const Dims& d, int64_t es) {
  const int64_t rows = d.batch * d.dl + d.gl;
  Layout l;
  l.spec = Align256(4 * rows * d.n);
  l.u = l.spec + Align256(8 * rows * d.f);
  l.sums = l.u + Align256(es * d.batch * d.d * 2 * d.c);
  l.end = l.sums + Align256(es * d.batch * d.dl * d.len);
  return l;
}

template <typename T>
int Run(kf_ctx* ctx, State* st, const Dims& d) {
  const Layout l = Plan(d, sizeof(T));
  if (static_cast<int64_t>(ctx->workspace.nbytes) < l.end) return 1;
  char* ws = static_cast<char*>(ctx->workspace.data);
  float* pad = reinterpret_cast<float*>(ws);
  float2* spec = reinterpret_cast<float2*>(ws + l.spec);
  T* u = reinterpret_cast<T*>(ws + l.u);
  T* sums = reinterpret_cast<T*>(ws + l.sums);
  // f32: the C2R output itself is what peers pull (no narrowing needed).
  constexpr bool kNarrow = sizeof(T) < 4;
  Peers p;
  for (int r = 0; r < d.world; ++r) {
    const char* base = static_cast<const char*>(ctx->workspace.peers[r]);
    p.u[r] = base + l.u;
    p.conv[r] = base + (kNarrow ? l.sums : 0);
    p.pad[r] = static_cast<uint32_t*>(ctx->signal_pad.peers[r]);
  }
  p.own_pad = static_cast<uint32_t*>(ctx->signal_pad.data);
  const T* x1 = static_cast<const T*>(kf_input(ctx, "x1")->data);
  const T* x2 = static_cast<const T*>(kf_input(ctx, "x2")->data);
  const T* v = static_cast<const T*>(kf_input(ctx, "v")->data);
  const T* h = static_cast<const T*>(kf_input(ctx, "h")->data);
  const T* bias = static_cast<const T*>(kf_input(ctx, "bias")->data);
  cudaStream_t s = ctx->stream;

  const int64_t shard = d.batch * d.d * 2 * d.c;
  Product<T><<<Blocks(shard), 256, 0, s>>>(x2, v, u, shard);
  Barrier<<<1, 32, 0, s>>>(p, st->epoch, d.rank, d.world);  // every rank's u is ready
  constexpr int kVec = 16 / sizeof(T);
  const int64_t rows = d.batch * d.dl + d.gl;
  if (d.c % kVec == 0) {
    Prepare<T, kVec><<<Grid(rows, d.n / kVec), 256, 0, s>>>(p, h, pad, d);
  } else {
    Prepare<T, 1><<<Grid(rows, d.n), 256, 0, s>>>(p, h, pad, d);
  }
  if (cudaGetLastError() != cudaSuccess) return 1;
  const cufftHandle fwd = st->plans[kFwd], inv = st->plans[kInv];
  if (cufftSetStream(fwd, s) != CUFFT_SUCCESS || cufftSetStream(inv, s) != CUFFT_SUCCESS) return 1;
  if (cufftExecR2C(fwd, pad, reinterpret_cast<cufftComplex*>(spec)) != CUFFT_SUCCESS) return 1;
  Multiply<<<Grid(d.batch * d.dl, d.f), 256, 0, s>>>(spec, d, static_cast<float>(1.0 / d.n));
  if (cudaGetLastError() != cudaSuccess) return 1;
  // The signal rows' C2R lands on their own padded rows, free after the R2C.
  if (cufftExecC2R(inv, reinterpret_cast<cufftComplex*>(spec), pad) != CUFFT_SUCCESS) return 1;
  if (kNarrow) Narrow<T><<<Grid(d.batch * d.dl, d.len), 256, 0, s>>>(pad, sums, d);
  Barrier<<<1, 32, 0, s>>>(p, st->epoch, d.rank, d.world);  // every rank's filter sums are ready
  dim3 grid(static_cast<unsigned>((2 * d.c + 31) / 32), static_cast<unsigned>((d.d + 31) / 32),
            static_cast<unsigned>(d.batch));
  T* y = static_cast<T*>(kf_output(ctx, "y")->data);
  if (kNarrow) {
    Pull<T, T><<<grid, dim3(32, 8), 0, s>>>(p, x1, u, bias, y, d, d.len);
  } else {
    Pull<T, float><<<grid, dim3(32, 8), 0, s>>>(p, x1, u, bias, y, d, d.n);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  Dims d;
  if (!ReadDims(ctx, &d) || d.world > 32) return 1;
  State* st = new State;
  ctx->user = st;
  if (cudaMalloc(&st->epoch, sizeof(uint32_t)) != cudaSuccess) return 1;
  if (cudaMemset(st->epoch, 0, sizeof(uint32_t)) != cudaSuccess) return 1;
  size_t sizes[kPlans] = {};
  if (!MakePlan(st, kFwd, d.n, d.batch * d.dl + d.gl, CUFFT_R2C, &sizes[kFwd])) return 1;
  if (!MakePlan(st, kInv, d.n, d.batch * d.dl, CUFFT_C2R, &sizes[kInv])) return 1;
  size_t most = 0;
  for (size_t bytes : sizes) most = bytes > most ? bytes : most;
  if (most > 0 && cudaMalloc(&st->work, most) != cudaSuccess) return 1;
  for (int i = 0; i < kPlans; ++i) {
    if (cufftSetWorkArea(st->plans[i], st->work) != CUFFT_SUCCESS) return 1;
  }
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  Dims d;
  if (st == nullptr || !ReadDims(ctx, &d)) return 1;
  switch (kf_input(ctx, "x1")->dtype) {
    case KF_BF16:
      return Run<__nv_bfloat16>(ctx, st, d);
    case KF_F32:
      return Run<float>(ctx, st, d);
    default:
      return 2;
  }
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  for (int i = 0; i < kPlans; ++i) {
    if (st->made[i] && cufftDestroy(st->plans[i]) != CUFFT_SUCCESS) rc = 1;
  }
  if (st->work != nullptr && cudaFree(st->work) != cudaSuccess) rc = 1;
  if (st->epoch != nullptr && cudaFree(st->epoch) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
