// Vocabulary-parallel sampling baseline, as vLLM does it: an all-gather of the logit
// shards (LogitsProcessor._gather_logits), then every rank samples from the full rows
// (Sampler: greedy rows by argmax; the rest top-k, top-p and an inverse-CDF draw). The
// exact top-k is two-stage: the best top_k of every 4096-logit segment, then of those.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

// Tokens are ranked by a 64-bit key: the logit's order-preserving bits above, the
// complement of the token id below, so that a larger key is a larger logit or, for equal
// logits, a smaller id (the task's total order). Key 0 is never a real token's: it pads.
constexpr int kThreads = 512;
constexpr int kSeg = 4096;  // logits per segment in stage 1; also the most keys one merge takes
constexpr int kMaxK = 64;

__device__ __forceinline__ uint64_t MakeKey(float f, uint32_t id) {
  if (f == 0.0f) f = 0.0f;  // -0 and +0 are the same logit
  const uint32_t b = __float_as_uint(f);
  const uint32_t ord = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<uint64_t>(ord) << 32) | (0xFFFFFFFFu - id);
}
__device__ __forceinline__ uint32_t KeyId(uint64_t key) {
  return 0xFFFFFFFFu - static_cast<uint32_t>(key);
}
__device__ __forceinline__ float KeyValue(uint64_t key) {
  const uint32_t ord = static_cast<uint32_t>(key >> 32);
  return __uint_as_float((ord & 0x80000000u) ? (ord & 0x7FFFFFFFu) : ~ord);
}

template <typename T>
__device__ __forceinline__ float ToFloat(T v) {
  return static_cast<float>(v);
}

struct SelectShared {
  uint64_t keys[kSeg];
  uint32_t hist[256];
  uint64_t cand[kMaxK];
  uint64_t top[kMaxK];  // the k largest keys, largest first
  double cum[kMaxK];
  int digit, count;
  uint32_t above, bin;
};

// The k largest of sh.keys[0..n) (distinct, or 0 padding), largest first, into sh.top:
// an MSB-first radix select of the k-th largest key over 8-bit digits, stopping as soon
// as the bucket that holds it is taken whole, then the keys at or above it ranked.
__device__ void BlockTopK(SelectShared& sh, int n, int k) {
  uint64_t prefix = 0, mask = 0;
  uint32_t remaining = static_cast<uint32_t>(k);
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) sh.hist[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const uint64_t key = sh.keys[i];
      if ((key & mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & 255], 1u);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l holds bins 255 - 8l .. 248 - 8l (largest first).
      const int lane = threadIdx.x;
      uint32_t mine = 0;
      for (int j = 0; j < 8; ++j) mine += sh.hist[255 - 8 * lane - j];
      uint32_t incl = mine;
      for (int off = 1; off < 32; off <<= 1) {
        const uint32_t v = __shfl_up_sync(0xFFFFFFFFu, incl, off);
        if (lane >= off) incl += v;
      }
      uint32_t before = incl - mine;
      if (before < remaining && remaining <= incl) {
        for (int j = 0; j < 8; ++j) {
          const int d = 255 - 8 * lane - j;
          if (before + sh.hist[d] >= remaining) {
            sh.digit = d;
            sh.above = before;
            sh.bin = sh.hist[d];
            break;
          }
          before += sh.hist[d];
        }
      }
    }
    __syncthreads();
    prefix |= static_cast<uint64_t>(sh.digit) << shift;
    mask |= static_cast<uint64_t>(255) << shift;
    remaining -= sh.above;
    if (sh.bin == remaining) break;  // the whole bucket is in: every key >= prefix
  }
  // `prefix` (its unfixed bits 0) is now a threshold with exactly k keys at or above it.
  if (threadIdx.x == 0) sh.count = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const uint64_t key = sh.keys[i];
    if (key >= prefix) {
      const int pos = atomicAdd(&sh.count, 1);
      if (pos < kMaxK) sh.cand[pos] = key;
    }
  }
  __syncthreads();
  if (threadIdx.x < k) {
    const uint64_t key = sh.cand[threadIdx.x];
    int rank = 0;
    for (int j = 0; j < k; ++j) rank += sh.cand[j] > key;
    sh.top[rank] = key;
  }
  __syncthreads();
}

// Stage 1: the best min(top_k, 64) keys of one segment of one row, padded with 0 to 64.
// Segment s of a row lies in vocabulary slice s / segs_per_slice (a rank's shard), at
// offset (s % segs_per_slice) * kSeg; slice r's row b starts at base + r * slice_stride + b * vl.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    SegmentTopK(const T* base, int64_t slice_stride, int first_slice, int64_t vl,
                int segs_per_slice, const int32_t* top_k, uint64_t* cand, int segs_per_row) {
  __shared__ SelectShared sh;
  const int s = blockIdx.x, b = blockIdx.y;
  const int slice = s / segs_per_slice;
  const int64_t begin = static_cast<int64_t>(s % segs_per_slice) * kSeg;
  const int n = static_cast<int>(min(static_cast<int64_t>(kSeg), vl - begin));
  const T* row = base + slice * slice_stride + b * vl;
  const uint32_t id0 = static_cast<uint32_t>((first_slice + slice) * vl + begin);
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    sh.keys[i] = MakeKey(ToFloat(row[begin + i]), id0 + i);
  __syncthreads();
  const int k = min(min(top_k[b], kMaxK), n);
  BlockTopK(sh, n, k);
  uint64_t* out = cand + (static_cast<int64_t>(b) * segs_per_row + s) * kMaxK;
  if (threadIdx.x < kMaxK) out[threadIdx.x] = threadIdx.x < k ? sh.top[threadIdx.x] : 0;
}

// The task's sampling rule over sh.top[0..k) (largest first), in fp64; thread 0 returns it.
__device__ int32_t SampleTop(SelectShared& sh, int k, float temperature, float top_p, float u) {
  if (temperature == 0.0f) return static_cast<int32_t>(KeyId(sh.top[0]));
  if (threadIdx.x < k) {
    const double z1 = KeyValue(sh.top[0]);
    sh.cum[threadIdx.x] = exp((static_cast<double>(KeyValue(sh.top[threadIdx.x])) - z1) /
                              static_cast<double>(temperature));
  }
  __syncthreads();
  int32_t token = 0;
  if (threadIdx.x == 0) {
    for (int j = 1; j < k; ++j) sh.cum[j] += sh.cum[j - 1];
    const double keep = static_cast<double>(top_p) * sh.cum[k - 1];
    int n = 0;
    while (n < k - 1 && sh.cum[n] < keep) ++n;
    const double pick = static_cast<double>(u) * sh.cum[n];
    int m = 0;
    while (m < n && !(sh.cum[m] > pick)) ++m;
    token = static_cast<int32_t>(KeyId(sh.top[m]));
  }
  return token;
}

// The best min(top_k, V) of a row's segment candidates, then the sample.
__global__ void __launch_bounds__(kThreads)
    MergeSample(const uint64_t* cand, int segs_per_row, const int32_t* top_k,
                const float* temperature, const float* top_p, const float* u, int64_t v,
                int32_t* token) {
  __shared__ SelectShared sh;
  const int b = blockIdx.x;
  const int n = segs_per_row * kMaxK;
  const uint64_t* mine = cand + static_cast<int64_t>(b) * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) sh.keys[i] = mine[i];
  __syncthreads();
  const int k = static_cast<int>(min(static_cast<int64_t>(min(top_k[b], kMaxK)), v));
  BlockTopK(sh, n, k);
  const int32_t t = SampleTop(sh, k, temperature[b], top_p[b], u[b]);
  if (threadIdx.x == 0) token[b] = t;
}

template <typename T>
int Run(kf_ctx* ctx) {
  const kf_tensor& logits = *kf_input(ctx, "logits");
  const int w = ctx->world_size;
  const int64_t rows = logits.shape[0], vl = logits.shape[1];
  const int segs_per_slice = static_cast<int>((vl + kSeg - 1) / kSeg);
  const int segs_per_row = w * segs_per_slice;
  if (rows == 0) return 0;
  if (segs_per_row * kMaxK > kSeg) return 10;  // one merge must fit a segment's keys
  const size_t gathered_bytes = static_cast<size_t>(w) * logits.nbytes;
  const size_t cand_bytes = static_cast<size_t>(rows) * segs_per_row * kMaxK * sizeof(uint64_t);
  if (gathered_bytes + cand_bytes > ctx->workspace.nbytes) return 11;
  char* ws = static_cast<char*>(ctx->workspace.data);
  T* gathered = reinterpret_cast<T*>(ws);  // [W, B, VL]: rank r's shard at r * B * VL
  uint64_t* cand = reinterpret_cast<uint64_t*>(ws + ((gathered_bytes + 255) / 256) * 256);
  if (((gathered_bytes + 255) / 256) * 256 + cand_bytes > ctx->workspace.nbytes) return 11;
  if (kf_all_gather(ctx, logits.data, gathered, static_cast<size_t>(logits.numel), logits.dtype))
    return 12;
  const int32_t* top_k = static_cast<const int32_t*>(kf_input(ctx, "top_k")->data);
  SegmentTopK<T><<<dim3(segs_per_row, static_cast<unsigned>(rows)), kThreads, 0, ctx->stream>>>(
      gathered, rows * vl, 0, vl, segs_per_slice, top_k, cand, segs_per_row);
  if (cudaGetLastError() != cudaSuccess) return 13;
  MergeSample<<<static_cast<unsigned>(rows), kThreads, 0, ctx->stream>>>(
      cand, segs_per_row, top_k, static_cast<const float*>(kf_input(ctx, "temperature")->data),
      static_cast<const float*>(kf_input(ctx, "top_p")->data),
      static_cast<const float*>(kf_input(ctx, "u")->data), vl * w,
      static_cast<int32_t*>(kf_output(ctx, "token")->data));
  return cudaGetLastError() != cudaSuccess ? 14 : 0;
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  switch (kf_input(ctx, "logits")->dtype) {
    case KF_BF16:
      return Run<__nv_bfloat16>(ctx);
    case KF_F32:
      return Run<float>(ctx);
    default:
      return 1;
  }
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
