// Distributed k-NN baseline, as PKB's reference (and DINOv2's KnnModule) runs it: W rounds, one per
// owner rank o:
//   1. kf_broadcast of owner o's queries [Q, D] (PKB's dist.broadcast),
//   2. one cuBLAS GEMM of them against the local shard: sims[Q, n] fp32 (bf16 in, fp32 accumulate),
//   3. a top-k per row (RowTopK: radix select, as torch.topk, then a sort of the k winners),
//   4. two gathers to the owner (the candidates' keys, then their labels: PKB's two dist.gather),
//      built from kf_send / kf_recv,
//   5. on the owner, the top-k of the W*k candidates of each row, written to the outputs.
// Selection key: (order-preserving bits of the similarity) << 32 | (2^32 - 1 - global index), so a
// larger key is a larger similarity, then a smaller global index, and keys are distinct.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;
constexpr int kThreads = 1024;
constexpr int kMaxK = 256;

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
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

// Round 3's input: row `row` of this rank's similarities; the global index of column j is base + j.
struct LocalRows {
  const float* sims;
  const int64_t* labels;
  int64_t n;
  uint32_t base;
  __device__ int64_t Count() const { return n; }
  __device__ uint64_t Key(int row, int64_t j) const {
    return MakeKey(sims[row * n + j], base + static_cast<uint32_t>(j));
  }
  __device__ int64_t Label(int row, int64_t j) const { return labels[j]; }
};

// Round 5's input: gathered [W][Q][k] keys and labels; candidate c of row `row` is rank c / k's
// entry c % k.
struct GatheredRows {
  const uint64_t* keys;
  const int64_t* labels;
  int q, k, world;
  __device__ int64_t Count() const { return static_cast<int64_t>(world) * k; }
  __device__ int64_t At(int row, int64_t c) const {
    return ((c / k) * q + row) * static_cast<int64_t>(k) + c % k;
  }
  __device__ uint64_t Key(int row, int64_t c) const { return keys[At(row, c)]; }
  __device__ int64_t Label(int row, int64_t c) const { return labels[At(row, c)]; }
};

// One block per row: the k largest keys of the row, sorted descending. Radix select on 8-bit
// digits from the top (the keys are distinct, so exactly k keys are >= the threshold found), then
// a bitonic sort of the k winners in shared memory. final_out: write similarities and labels to
// the outputs; else write keys and labels to the candidate arrays.
template <class Src>
__global__ void __launch_bounds__(kThreads)
    RowTopK(Src src, int k, uint64_t* cand_keys, int64_t* cand_labels, float* out_sims,
            int64_t* out_labels, int final_out) {
  __shared__ unsigned hist[256];
  __shared__ uint64_t s_prefix;
  __shared__ int s_remaining, s_done, s_count;
  __shared__ uint64_t sel_key[kMaxK];
  __shared__ int64_t sel_label[kMaxK];
  const int row = blockIdx.x;
  const int64_t m = src.Count();
  uint64_t prefix = 0, mask = 0;
  int remaining = k;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
      const uint64_t key = src.Key(row, j);
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
      s_count = 0;
    }
    __syncthreads();
    remaining = s_remaining;
    prefix = s_prefix;
    mask |= static_cast<uint64_t>(255) << shift;
    const int done = s_done;
    __syncthreads();
    if (done) break;
  }
  // Exactly k keys are >= prefix.
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    const uint64_t key = src.Key(row, j);
    if (key >= prefix) {
      const int pos = atomicAdd(&s_count, 1);
      if (pos < kMaxK) {
        sel_key[pos] = key;
        sel_label[pos] = src.Label(row, j);
      }
    }
  }
  __syncthreads();
  int p2 = 1;
  while (p2 < k) p2 <<= 1;
  for (int i = k + threadIdx.x; i < p2; i += blockDim.x) {
    sel_key[i] = 0;  // below every real key
    sel_label[i] = 0;
  }
  __syncthreads();
  // Bitonic sort, descending.
  for (int size = 2; size <= p2; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < p2; i += blockDim.x) {
        const int j = i ^ stride;
        if (j > i) {
          const bool first_half = (i & size) == 0;
          const uint64_t a = sel_key[i], b = sel_key[j];
          if (first_half ? (a < b) : (a > b)) {
            sel_key[i] = b;
            sel_key[j] = a;
            const int64_t t = sel_label[i];
            sel_label[i] = sel_label[j];
            sel_label[j] = t;
          }
        }
      }
      __syncthreads();
    }
  }
  for (int i = threadIdx.x; i < k; i += blockDim.x) {
    const int64_t o = static_cast<int64_t>(row) * k + i;
    if (final_out) {
      out_sims[o] = KeySim(sel_key[i]);
      out_labels[o] = sel_label[i];
    } else {
      cand_keys[o] = sel_key[i];
      cand_labels[o] = sel_label[i];
    }
  }
}

size_t Align(size_t b) { return (b + 255) / 256 * 256; }

// PKB's dist.gather: every rank's `count` elements land at recv + p * count on `owner`.
int Gather(kf_ctx* ctx, const void* send, void* recv, size_t count, int owner) {
  const size_t bytes = count * 8;
  if (ctx->rank == owner) {
    if (cudaMemcpyAsync(static_cast<char*>(recv) + owner * bytes, send, bytes,
                        cudaMemcpyDeviceToDevice, ctx->stream) != cudaSuccess)
      return 1;
    if (kf_group_start(ctx) != 0) return 1;
    for (int p = 0; p < ctx->world_size; ++p) {
      if (p != owner && kf_recv(ctx, static_cast<char*>(recv) + p * bytes, count, KF_I64, p) != 0)
        return 1;
    }
    return kf_group_end(ctx);
  }
  if (kf_group_start(ctx) != 0) return 1;
  if (kf_send(ctx, send, count, KF_I64, owner) != 0) return 1;
  return kf_group_end(ctx);
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  State* st = new State;
  ctx->user = st;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
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
  if (st == nullptr || test == nullptr || train == nullptr || labels == nullptr ||
      out_sims == nullptr || out_labels == nullptr)
    return 1;
  if (test->dtype != KF_BF16) return 2;
  const int world = ctx->world_size, rank = ctx->rank;
  const int64_t q = test->shape[0], d = test->shape[1], n = train->shape[1];
  const int k = static_cast<int>(out_sims->shape[1]);
  if (k < 1 || k > kMaxK || k > n) return 2;

  char* ws = static_cast<char*>(ctx->workspace.data);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* p = ws + off;
    off += Align(bytes);
    return p;
  };
  __nv_bfloat16* queries = reinterpret_cast<__nv_bfloat16*>(take(q * d * 2));
  float* sims = reinterpret_cast<float*>(take(q * n * 4));
  uint64_t* cand_keys = reinterpret_cast<uint64_t*>(take(q * k * 8));
  int64_t* cand_labels = reinterpret_cast<int64_t*>(take(q * k * 8));
  uint64_t* all_keys = reinterpret_cast<uint64_t*>(take(world * q * k * 8));
  int64_t* all_labels = reinterpret_cast<int64_t*>(take(world * q * k * 8));
  if (off > ctx->workspace.nbytes) return 3;

  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  const float alpha = 1.0f, beta = 0.0f;
  LocalRows local{sims, static_cast<const int64_t*>(labels->data), n,
                  static_cast<uint32_t>(rank * n)};
  GatheredRows gathered{all_keys, all_labels, static_cast<int>(q), k, world};
  for (int owner = 0; owner < world; ++owner) {
    if (kf_broadcast(ctx, test->data, queries, static_cast<size_t>(q * d), KF_BF16, owner) != 0)
      return 1;
    // Row-major sims[Q, n] = queries[Q, D] @ train[D, n] is column-major sims^T = train^T
    // queries^T.
    if (cublasGemmEx(st->handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(q),
                     static_cast<int>(d), &alpha, train->data, CUDA_R_16BF, static_cast<int>(n),
                     queries, CUDA_R_16BF, static_cast<int>(d), &beta, sims, CUDA_R_32F,
                     static_cast<int>(n), CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
      return 1;
    RowTopK<<<static_cast<int>(q), kThreads, 0, ctx->stream>>>(local, k, cand_keys, cand_labels,
                                                               nullptr, nullptr, 0);
    if (Gather(ctx, cand_keys, all_keys, static_cast<size_t>(q * k), owner) != 0) return 1;
    if (Gather(ctx, cand_labels, all_labels, static_cast<size_t>(q * k), owner) != 0) return 1;
    if (rank == owner) {
      RowTopK<<<static_cast<int>(q), kThreads, 0, ctx->stream>>>(
          gathered, k, nullptr, nullptr, static_cast<float*>(out_sims->data),
          static_cast<int64_t*>(out_labels->data), 1);
    }
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = 0;
  if (st->handle != nullptr && cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  if (st->cublas_ws != nullptr && cudaFree(st->cublas_ws) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
