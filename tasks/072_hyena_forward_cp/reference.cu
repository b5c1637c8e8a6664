// Hyena long-convolution forward under zigzag context parallelism, as Savanna
// does it with PyTorch: three all_to_all_singles take x1, x2 and v from
// sequence shards to channel shards (the harness all-to-all, NCCL's on real
// GPUs), the zigzag order is undone, u = x2 * v, fftconv_ref (rfft of u and of
// the filter at n = 2L on cuFFT, multiply, irfft, keep L, + u * bias), y =
// x1 * z, the zigzag order restored and one all-to-all back, then the
// transpose to [B, 2C, D]. The elementwise steps are fused into the kernels
// around the transforms (PyTorch runs them one by one), and each rounds where
// PyTorch rounds in the input dtype: u, the fftconv result and y.
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
// v rounded to T, as a PyTorch op in dtype T leaves it.
template <typename T>
__device__ __forceinline__ float Round(float v) {
  return ToF(FromF<T>(v));
}

// The elementwise kernels walk [rows x cols] arrays: blocks stride the rows
// along y and the columns along x, so that the per-element index arithmetic
// has no 64-bit division (PyTorch's TensorIterator avoids it likewise).
#define FOR_ROWS(row, rows) for (int64_t row = blockIdx.y; row < (rows); row += gridDim.y)
#define FOR_COLS(col, cols)                                                                     \
  for (int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; col < (cols); \
       col += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Where global position t (< L, so it fits an int) of local channel row
// (b, c) sits in the received all-to-all blocks recv[p][b][c][j]: rank p = the
// holder of t's chunk, j its local position there (chunk p first, chunk
// 2W-1-p second).
__device__ __forceinline__ int64_t ZigzagIndex(const Dims& d, int64_t b, int64_t c, int64_t t) {
  const int k = static_cast<int>(t) / static_cast<int>(d.c);
  const int64_t i = t - k * d.c;
  const bool second = k >= d.world;
  const int64_t p = second ? 2 * d.world - 1 - k : k;
  return ((p * d.batch + b) * d.dl + c) * 2 * d.c + (second ? d.c : 0) + i;
}

// send[p][b][c][j] = x[b][p*Dl + c][j]: the permute(1, 0, 2, 3).contiguous().
template <typename T>
__global__ void Pack(const T* __restrict__ x, T* __restrict__ send, Dims d) {
  const int64_t row_len = 2 * d.c;
  FOR_ROWS(row, d.batch * d.d) {
    const int64_t ch = row % d.d, b = row / d.d, p = ch / d.dl, c = ch % d.dl;
    T* dst = send + ((p * d.batch + b) * d.dl + c) * row_len;
    FOR_COLS(j, row_len) dst[j] = x[row * row_len + j];
  }
}

// pad_u[b*Dl + c][t] = T(x2 * v) at global position t < L, zero up to 2L.
template <typename T>
__global__ void PadSignal(const T* __restrict__ x2, const T* __restrict__ v,
                          float* __restrict__ pad, Dims d) {
  FOR_ROWS(row, d.batch * d.dl) {
    const int64_t b = row / d.dl, c = row % d.dl;
    FOR_COLS(t, d.n) {
      float u = 0.f;
      if (t < d.len) {
        const int64_t at = ZigzagIndex(d, b, c, t);
        u = Round<T>(ToF(x2[at]) * ToF(v[at]));
      }
      pad[row * d.n + t] = u;
    }
  }
}

// pad_h[g][t] = h[rank*Gl + g][t] for t < min(Lh, L), zero up to 2L (rfft(h, n=2L)
// truncates a longer filter; taps past L only reach outputs the irfft drops).
template <typename T>
__global__ void PadFilter(const T* __restrict__ h, float* __restrict__ pad, Dims d) {
  const int64_t taps = d.lh < d.len ? d.lh : d.len;
  FOR_ROWS(g, d.gl) {
    const T* src = h + (d.rank * d.gl + g) * d.lh;
    FOR_COLS(t, d.n) pad[g * d.n + t] = t < taps ? ToF(src[t]) : 0.f;
  }
}

// spec_u[b*Dl + c][k] *= spec_h[c / GD][k] / 2L (the irfft's norm).
__global__ void Multiply(float2* __restrict__ su, const float2* __restrict__ sh, Dims d,
                         float scale) {
  FOR_ROWS(row, d.batch * d.dl) {
    float2* a = su + row * d.f;
    const float2* w = sh + ((row % d.dl) / d.gd) * d.f;
    FOR_COLS(k, d.f) {
      const float2 x = a[k], y = w[k];
      a[k] = make_float2((x.x * y.x - x.y * y.y) * scale, (x.x * y.y + x.y * y.x) * scale);
    }
  }
}

// z = T(conv + u * bias), y = T(x1 * z), stored at send[p][b][c][j] for the
// rank p holding position t (the zigzag order restored for the way back).
template <typename T>
__global__ void Gate(const float* __restrict__ conv, const T* __restrict__ x1,
                     const T* __restrict__ x2, const T* __restrict__ v, const T* __restrict__ bias,
                     T* __restrict__ send, Dims d) {
  FOR_ROWS(row, d.batch * d.dl) {
    const int64_t b = row / d.dl, c = row % d.dl;
    const float bc = ToF(bias[d.rank * d.dl + c]);
    FOR_COLS(t, d.len) {
      const int64_t at = ZigzagIndex(d, b, c, t);
      const float u = Round<T>(ToF(x2[at]) * ToF(v[at]));
      const float z = Round<T>(conv[row * d.n + t] + u * bc);
      send[at] = FromF<T>(ToF(x1[at]) * z);
    }
  }
}

// y[b][j][p*Dl + c] = recv[p][b][c][j], through a 32 x 32 shared tile.
template <typename T>
__global__ void Transpose(const T* __restrict__ recv, T* __restrict__ y, Dims d) {
  __shared__ T tile[32][33];
  const int64_t rows = 2 * d.c, b = blockIdx.z;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * 32,
                ch0 = static_cast<int64_t>(blockIdx.y) * 32;
  for (int r = threadIdx.y; r < 32; r += blockDim.y) {
    const int64_t ch = ch0 + r, j = j0 + threadIdx.x;
    if (ch < d.d && j < rows) {
      const int64_t p = ch / d.dl, c = ch % d.dl;
      tile[r][threadIdx.x] = recv[((p * d.batch + b) * d.dl + c) * rows + j];
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
enum PlanId { kFwdU = 0, kFwdH, kInvU, kPlans };

struct State {
  cufftHandle plans[kPlans] = {};
  bool made[kPlans] = {};
  void* work = nullptr;
};

int64_t Align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

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

template <typename T>
int Run(kf_ctx* ctx, State* st, const Dims& d) {
  const int64_t es = sizeof(T);
  const int64_t block = d.batch * d.dl * 2 * d.c;  // elements per peer
  const int64_t xbytes = Align256(block * d.world * es);
  const int64_t pad_u_bytes = Align256(4 * d.batch * d.dl * d.n);
  const int64_t spec_u_bytes = Align256(8 * d.batch * d.dl * d.f);
  const int64_t pad_h_bytes = Align256(4 * d.gl * d.n);
  const int64_t spec_h_bytes = Align256(8 * d.gl * d.f);
  const int64_t need = 5 * xbytes + pad_u_bytes + spec_u_bytes + pad_h_bytes + spec_h_bytes;
  if (static_cast<int64_t>(ctx->workspace.nbytes) < need) return 1;
  char* ws = static_cast<char*>(ctx->workspace.data);
  T* send = reinterpret_cast<T*>(ws);
  T* recv[3] = {reinterpret_cast<T*>(ws + xbytes), reinterpret_cast<T*>(ws + 2 * xbytes),
                reinterpret_cast<T*>(ws + 3 * xbytes)};
  T* recv_out = reinterpret_cast<T*>(ws + 4 * xbytes);
  float* pad_u = reinterpret_cast<float*>(ws + 5 * xbytes);
  float2* spec_u = reinterpret_cast<float2*>(ws + 5 * xbytes + pad_u_bytes);
  float* pad_h = reinterpret_cast<float*>(ws + 5 * xbytes + pad_u_bytes + spec_u_bytes);
  float2* spec_h =
      reinterpret_cast<float2*>(ws + 5 * xbytes + pad_u_bytes + spec_u_bytes + pad_h_bytes);
  const kf_dtype dt = kf_input(ctx, "x1")->dtype;
  cudaStream_t s = ctx->stream;

  // Sequence shards to channel shards. With B = 1 the permute is the identity
  // (PyTorch's .contiguous() copies nothing), so x itself is the send buffer.
  const char* names[3] = {"x1", "x2", "v"};
  for (int i = 0; i < 3; ++i) {
    const T* x = static_cast<const T*>(kf_input(ctx, names[i])->data);
    const T* src = x;
    if (d.batch > 1) {
      Pack<T><<<Grid(d.batch * d.d, 2 * d.c), 256, 0, s>>>(x, send, d);
      if (cudaGetLastError() != cudaSuccess) return 1;
      src = send;
    }
    if (kf_all_to_all(ctx, src, recv[i], static_cast<size_t>(block), dt) != 0) return 1;
  }

  PadSignal<T><<<Grid(d.batch * d.dl, d.n), 256, 0, s>>>(recv[1], recv[2], pad_u, d);
  PadFilter<T>
      <<<Grid(d.gl, d.n), 256, 0, s>>>(static_cast<const T*>(kf_input(ctx, "h")->data), pad_h, d);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (cufftSetStream(st->plans[kFwdU], s) != CUFFT_SUCCESS ||
      cufftSetStream(st->plans[kFwdH], s) != CUFFT_SUCCESS ||
      cufftSetStream(st->plans[kInvU], s) != CUFFT_SUCCESS) {
    return 1;
  }
  if (cufftExecR2C(st->plans[kFwdU], pad_u, reinterpret_cast<cufftComplex*>(spec_u)) !=
          CUFFT_SUCCESS ||
      cufftExecR2C(st->plans[kFwdH], pad_h, reinterpret_cast<cufftComplex*>(spec_h)) !=
          CUFFT_SUCCESS) {
    return 1;
  }
  Multiply<<<Grid(d.batch * d.dl, d.f), 256, 0, s>>>(spec_u, spec_h, d,
                                                     static_cast<float>(1.0 / d.n));
  if (cudaGetLastError() != cudaSuccess) return 1;
  // C2R overwrites its input (spec_u, no longer needed); pad_u is free again too.
  if (cufftExecC2R(st->plans[kInvU], reinterpret_cast<cufftComplex*>(spec_u), pad_u) !=
      CUFFT_SUCCESS)
    return 1;
  Gate<T><<<Grid(d.batch * d.dl, d.len), 256, 0, s>>>(
      pad_u, recv[0], recv[1], recv[2], static_cast<const T*>(kf_input(ctx, "bias")->data), send,
      d);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_to_all(ctx, send, recv_out, static_cast<size_t>(block), dt) != 0) return 1;
  dim3 grid(static_cast<unsigned>((2 * d.c + 31) / 32), static_cast<unsigned>((d.d + 31) / 32),
            static_cast<unsigned>(d.batch));
  Transpose<T>
      <<<grid, dim3(32, 8), 0, s>>>(recv_out, static_cast<T*>(kf_output(ctx, "y")->data), d);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  Dims d;
  if (!ReadDims(ctx, &d)) return 1;
  State* st = new State;
  ctx->user = st;
  size_t sizes[kPlans] = {};
  if (!MakePlan(st, kFwdU, d.n, d.batch * d.dl, CUFFT_R2C, &sizes[kFwdU])) return 1;
  if (!MakePlan(st, kFwdH, d.n, d.gl, CUFFT_R2C, &sizes[kFwdH])) return 1;
  if (!MakePlan(st, kInvU, d.n, d.batch * d.dl, CUFFT_C2R, &sizes[kInvU])) return 1;
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
  delete st;
  ctx->user = nullptr;
  return rc;
}
