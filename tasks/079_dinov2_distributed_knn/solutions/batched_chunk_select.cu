// Distributed k-NN in one round instead of W: every rank's queries are all-gathered once, ONE cuBLAS
// GEMM scores all W*Q queries against the local shard, a chunked top-k reads each similarity from
// HBM once, and one all-to-all returns every owner its candidates.
//
// The baseline runs W rounds (broadcast, GEMM of Q rows, a radix top-k that reads each row of
// similarities from HBM four to five times, two gathers, a merge), i.e. 6W collectives and 4W
// kernels, and its top-k traffic dominates at ImageNet size. Here:
//   1. kf_all_gather of the queries -> allq[W*Q, D] (row R belongs to owner R / Q),
//   2. cuBLAS: sims[W*Q, n] = allq @ shard (bf16 in, fp32 accumulate; exact, see the task),
//   3. ChunkTopK over (chunk of 4096 columns, row) blocks: the chunk's keys go to shared memory
//      once, a radix select there finds the chunk's top-k, and the k winners go out unsorted;
//      repeated on the candidate lists until one chunk per row is left (k <= 256, so every level
//      shrinks a row at least 16x); the last level attaches the labels and writes the row's k
//      candidates into the send buffer slot of its owner,
//   4. kf_all_to_all of the [W][Q][k] (key, label) pairs,
//   5. on every rank, the top-k of its W*k received candidates per query, sorted, to the outputs.
// Keys: (order-preserving similarity bits) << 32 | (2^32 - 1 - global index): distinct, larger =
// better under the task's order (similarity descending, then global index ascending). Key 0 (a
// NaN's bits, never produced) pads lists shorter than k and is never selected over a real key.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;
constexpr int kThreads = 256;
constexpr int kChunk = 4096;
constexpr int kMaxK = 256;

struct Pair {
  uint64_t key;
  int64_t label;
};

__device__ __forceinline__ uint64_t MakeKey(float s, uint32_t g) {
  s += 0.0f;  // -0 -> +0: equal similarities must have equal keys
  uint32_t b = __float_as_uint(s);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<uint64_t>(b) << 32) | (0xffffffffu - g);
}

__device__ __forceinline__ float KeySim(uint64_t key) {
  uint32_t b = static_cast<uint32_t>(key >> 32);
  b = (b & 0x80000000u) ? (b & 0x7fffffffu) : ~b;
  return __uint_as_float(b);
}

// Sources: a row's candidates, Count() of them, the j-th as a key.
struct SimSrc {  // level 0: this rank's similarities; column j is global index base + j
  const float* sims;
  int64_t n;
  uint32_t base;
  __device__ int64_t Count() const { return n; }
  __device__ uint64_t Key(int row, int64_t j) const {
    return MakeKey(sims[row * n + j], base + static_cast<uint32_t>(j));
  }
};
struct KeySrc {  // later levels: the previous level's candidate keys, m per row
  const uint64_t* keys;
  int64_t m;
  __device__ int64_t Count() const { return m; }
  __device__ uint64_t Key(int row, int64_t j) const { return keys[row * m + j]; }
};
struct RecvSrc {  // the owner's merge: recv[src][Q][k]; candidate c is source c / k's entry c % k
  const Pair* recv;
  int q, k, world;
  __device__ int64_t Count() const { return static_cast<int64_t>(world) * k; }
  __device__ int64_t At(int row, int64_t c) const {
    return ((c / k) * q + row) * static_cast<int64_t>(k) + c % k;
  }
  __device__ uint64_t Key(int row, int64_t c) const { return recv[At(row, c)].key; }
};

// Destinations: entry j (< k) of chunk `chunk` of row `row`; pos is the key's index in the source.
struct CandDst {  // unsorted candidate keys, k per chunk
  static constexpr bool kSorted = false;
  uint64_t* out;
  int64_t stride;  // keys per row = chunks * k
  int k;
  __device__ void Write(int row, int chunk, int j, uint64_t key, int64_t) const {
    out[row * stride + static_cast<int64_t>(chunk) * k + j] = key;
  }
};
struct SendDst {  // a row's final local candidates with their labels, into the owner's send slot
  static constexpr bool kSorted = false;
  Pair* send;
  const int64_t* labels;
  uint32_t base;
  int q, k;
  __device__ void Write(int row, int, int j, uint64_t key, int64_t) const {
    int64_t label = 0;
    if (key != 0) label = labels[(0xffffffffu - static_cast<uint32_t>(key)) - base];
    send[static_cast<int64_t>(row) * k + j] = Pair{key, label};  // row = owner * Q + query
  }
};
struct OutDst {  // the merged top-k, sorted, to the outputs
  static constexpr bool kSorted = true;
  float* sims;
  int64_t* labels;
  RecvSrc src;
  int k;
  __device__ void Write(int row, int, int j, uint64_t key, int64_t pos) const {
    sims[static_cast<int64_t>(row) * k + j] = KeySim(key);
    labels[static_cast<int64_t>(row) * k + j] = src.recv[src.At(row, pos)].label;
  }
};

// Block (chunk x, row y): the top-min(k, m) keys of the chunk's m <= kChunk keys (padded with
// key 0 to k), sorted descending if the destination wants it.
template <class Src, class Dst>
__global__ void __launch_bounds__(kThreads) ChunkTopK(Src src, Dst dst, int k) {
  __shared__ uint64_t keys[kChunk];
  __shared__ unsigned hist[256];
  __shared__ uint64_t sel_key[kMaxK];
  __shared__ int64_t sel_pos[kMaxK];
  __shared__ uint64_t s_prefix;
  __shared__ int s_remaining, s_done, s_count;
  const int row = blockIdx.y;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kChunk;
  const int64_t left = src.Count() - c0;
  const int m = static_cast<int>(left < kChunk ? left : kChunk);
  for (int i = threadIdx.x; i < m; i += kThreads) keys[i] = src.Key(row, c0 + i);
  if (threadIdx.x == 0) s_count = 0;
  const int take = k < m ? k : m;
  uint64_t prefix = 0, mask = 0;  // prefix 0: every key is >= it (take all)
  int remaining = take;
  __syncthreads();
  if (take < m) {
    // Radix select from the top, 8 bits a pass, until the bucket holding the take-th largest key
    // is taken whole; then exactly `take` nonzero keys are >= prefix (nonzero keys are distinct).
    for (int shift = 56; shift >= 0; shift -= 8) {
      hist[threadIdx.x] = 0;  // kThreads == 256
      __syncthreads();
      for (int i = threadIdx.x; i < m; i += kThreads) {
        const uint64_t key = keys[i];
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        int acc = 0, d = 255;
        for (; d > 0; --d) {
          if (acc + static_cast<int>(hist[d]) >= remaining) break;
          acc += static_cast<int>(hist[d]);
        }
        s_remaining = remaining - acc;
        s_prefix = prefix | (static_cast<uint64_t>(d) << shift);
        s_done = static_cast<int>(hist[d]) == remaining - acc;
      }
      __syncthreads();
      remaining = s_remaining;
      prefix = s_prefix;
      mask |= static_cast<uint64_t>(255) << shift;
      const int done = s_done;
      __syncthreads();
      if (done) break;
    }
  }
  for (int i = threadIdx.x; i < m; i += kThreads) {
    const uint64_t key = keys[i];
    if (key != 0 && key >= prefix) {
      const int p = atomicAdd(&s_count, 1);
      if (p < take) {
        sel_key[p] = key;
        sel_pos[p] = c0 + i;
      }
    }
  }
  __syncthreads();
  const int got = s_count < take ? s_count : take;
  int width = k;
  if (Dst::kSorted) {
    width = 1;
    while (width < k) width <<= 1;
  }
  for (int i = got + threadIdx.x; i < width; i += kThreads) {
    sel_key[i] = 0;
    sel_pos[i] = -1;
  }
  __syncthreads();
  if (Dst::kSorted) {  // bitonic, descending
    for (int size = 2; size <= width; size <<= 1) {
      for (int stride = size >> 1; stride > 0; stride >>= 1) {
        const int i = threadIdx.x, j = i ^ stride;
        if (i < width && j > i) {
          const bool first_half = (i & size) == 0;
          const uint64_t a = sel_key[i], b = sel_key[j];
          if (first_half ? (a < b) : (a > b)) {
            sel_key[i] = b;
            sel_key[j] = a;
            const int64_t t = sel_pos[i];
            sel_pos[i] = sel_pos[j];
            sel_pos[j] = t;
          }
        }
        __syncthreads();
      }
    }
  }
  for (int j = threadIdx.x; j < k; j += kThreads)
    dst.Write(row, static_cast<int>(blockIdx.x), j, sel_key[j], sel_pos[j]);
}

int64_t Cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
  __nv_bfloat16* allq = nullptr;
  float* sims = nullptr;
  uint64_t* cand[2] = {nullptr, nullptr};
  Pair* send = nullptr;
  Pair* recv = nullptr;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  State* st = new State;
  ctx->user = st;
  const kf_tensor* test = kf_input(ctx, "test_features");
  const kf_tensor* train = kf_input(ctx, "train_features_t");
  const kf_tensor* out = kf_output(ctx, "topk_sims");
  if (test == nullptr || train == nullptr || out == nullptr) return 1;
  const int64_t w = ctx->world_size, q = test->shape[0], d = test->shape[1], n = train->shape[1];
  const int64_t k = out->shape[1];
  const int64_t rows = w * q;
  const int64_t cand = rows * Cdiv(n, kChunk) * k;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    return 1;
  if (cudaMalloc(&st->allq, rows * d * sizeof(__nv_bfloat16)) != cudaSuccess ||
      cudaMalloc(&st->sims, rows * n * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&st->cand[0], cand * sizeof(uint64_t)) != cudaSuccess ||
      cudaMalloc(&st->cand[1], cand * sizeof(uint64_t)) != cudaSuccess ||
      cudaMalloc(&st->send, rows * k * sizeof(Pair)) != cudaSuccess ||
      cudaMalloc(&st->recv, rows * k * sizeof(Pair)) != cudaSuccess)
    return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor* test = kf_input(ctx, "test_features");
  const kf_tensor* train = kf_input(ctx, "train_features_t");
  const kf_tensor* labels = kf_input(ctx, "train_labels");
  kf_tensor* out_sims = kf_output(ctx, "topk_sims");
  kf_tensor* out_labels = kf_output(ctx, "topk_labels");
  if (st == nullptr || st->recv == nullptr || test == nullptr || train == nullptr ||
      labels == nullptr || out_sims == nullptr || out_labels == nullptr)
    return 1;
  if (test->dtype != KF_BF16) return 2;
  const int world = ctx->world_size, rank = ctx->rank;
  const int64_t q = test->shape[0], d = test->shape[1], n = train->shape[1];
  const int k = static_cast<int>(out_sims->shape[1]);
  const int rows = static_cast<int>(world * q);
  if (k < 1 || k > kMaxK || k > n || static_cast<int64_t>(world) * k > kChunk) return 2;

  // 1. Every rank's queries, in rank order.
  if (kf_all_gather(ctx, test->data, st->allq, static_cast<size_t>(q * d), KF_BF16) != 0) return 1;
  // 2. sims[rows, n] = allq[rows, D] @ shard[D, n] (column-major: sims^T = shard^T allq^T).
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  const float alpha = 1.0f, beta = 0.0f;
  if (cublasGemmEx(st->handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), rows,
                   static_cast<int>(d), &alpha, train->data, CUDA_R_16BF, static_cast<int>(n),
                   st->allq, CUDA_R_16BF, static_cast<int>(d), &beta, st->sims, CUDA_R_32F,
                   static_cast<int>(n), CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
    return 1;
  // 3. Per row: chunked top-k until one chunk is left, whose top-k goes to the owner's slot.
  const uint32_t base = static_cast<uint32_t>(rank * n);
  SendDst send{st->send, static_cast<const int64_t*>(labels->data), base, static_cast<int>(q), k};
  SimSrc level0{st->sims, n, base};
  int64_t chunks = Cdiv(n, kChunk);
  if (chunks == 1) {
    ChunkTopK<<<dim3(1, rows), kThreads, 0, ctx->stream>>>(level0, send, k);
  } else {
    int cur = 0;
    ChunkTopK<<<dim3(static_cast<unsigned>(chunks), rows), kThreads, 0, ctx->stream>>>(
        level0, CandDst{st->cand[cur], chunks * k, k}, k);
    int64_t m = chunks * k;
    while (m > kChunk) {
      chunks = Cdiv(m, kChunk);
      ChunkTopK<<<dim3(static_cast<unsigned>(chunks), rows), kThreads, 0, ctx->stream>>>(
          KeySrc{st->cand[cur], m}, CandDst{st->cand[1 - cur], chunks * k, k}, k);
      cur = 1 - cur;
      m = chunks * k;
    }
    ChunkTopK<<<dim3(1, rows), kThreads, 0, ctx->stream>>>(KeySrc{st->cand[cur], m}, send, k);
  }
  // 4. Rows R = owner * Q + i: block `owner` of the send buffer goes to rank `owner`.
  if (kf_all_to_all(ctx, st->send, st->recv, static_cast<size_t>(q * k * 2), KF_I64) != 0) return 1;
  // 5. The owner's merge of W lists of k.
  RecvSrc merged{st->recv, static_cast<int>(q), k, world};
  OutDst out{static_cast<float*>(out_sims->data), static_cast<int64_t*>(out_labels->data), merged,
             k};
  ChunkTopK<<<dim3(1, static_cast<unsigned>(q)), kThreads, 0, ctx->stream>>>(merged, out, k);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (st->handle != nullptr && cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  void* bufs[] = {st->cublas_ws, st->allq, st->sims, st->cand[0], st->cand[1], st->send, st->recv};
  for (void* b : bufs)
    if (b != nullptr && cudaFree(b) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
