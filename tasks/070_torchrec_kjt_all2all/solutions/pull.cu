// KJT all-to-all by pulling: every rank reads the lengths and ids of its own features straight
// from the peers' inputs (peer pointers) into their final, recat order. No split all-to-all, no
// host round trip (the baseline stops the stream to read the splits on the host, as TorchRec's
// .tolist() does), no receive buffers and no second pass for the recat.
//
// Three kernels:
//   1. Publish (a block per feature f): the ids of feature f on this rank (the sum of its b
//      lengths) into slot e % 2 of this rank's workspace, then a flag (f, this rank) = e on every
//      peer's signal pad, e being the call's epoch. The flag is stored with release semantics by
//      the thread that wrote the sum, so a peer that sees it sees the sum; it also tells the peer
//      that this rank is in call e, so its inputs are in place.
//   2. Plan (one block): waits for every flag of every peer, reads all ranks' batch sizes and
//      per-feature id counts, and lays out the 2 * W * F_r copies (for each local feature k and
//      source s, the b_s lengths and the ids of feature off_r + k on rank s, which start after
//      the ids of the features before it), in output order; writes the strides and the counts.
//   3. Copy: one index space over all the outputs' entries (lengths, then ids), in chunks of
//      kChunk; a chunk finds its first copy by binary search and copies 16 bytes at a time where
//      source and destination are equally aligned.
// The per-feature sums are double-buffered by epoch parity: a peer may already be in call e + 1,
// writing slot (e + 1) % 2 while this rank still reads slot e % 2; it cannot reach call e + 2
// before this rank has published in call e + 1, which it does only after its call e finished.
// No end barrier: only peers' inputs and published sums are read, only this rank's outputs are
// written.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kPublishThreads = 256;
constexpr int kPlanThreads = 1024;
constexpr int kCopyThreads = 512;
constexpr int64_t kChunk = 4096;  // entries per block step of the copy

// Table-wise key splits (task.toml): rank d owns count[d] features from offset[d] on.
struct Split {
  int64_t count[KF_MAX_RANKS];
  int64_t offset[KF_MAX_RANKS + 1];
};

Split MakeSplit(int world, int64_t nf, int64_t u) {
  Split s = {};
  for (int d = 0; d < world; ++d) {
    s.count[d] = nf / world + (d < nf % world ? 1 : 0) + u * (d % 3);
    s.offset[d + 1] = s.offset[d] + s.count[d];
  }
  return s;
}

struct Peers {
  const int64_t* lengths[KF_MAX_RANKS];
  const int64_t* values[KF_MAX_RANKS];
  const int64_t* batch[KF_MAX_RANKS];
  const int64_t* sums[KF_MAX_RANKS];  // 2 slots of F per-feature id counts (workspace)
  uint32_t* pad[KF_MAX_RANKS];        // flag (f, s) at pad[f * W + s] of the receiver
};

// One copy: entries [start, next copy's start) of the index space, from src to dst.
struct Copy {
  const int64_t* src;
  int64_t* dst;
  int64_t start;
};

struct Outputs {
  int64_t* lengths;
  int64_t* values;
  int64_t* stride;
  int64_t* per_rank;
  int64_t* lengths_count;
  int64_t* values_count;
};

__global__ void __launch_bounds__(kPublishThreads)
    Publish(Peers p, int rank, int world, int features, const uint32_t* epoch, int64_t* sums) {
  __shared__ int64_t partial[kPublishThreads / 32];
  const int f = blockIdx.x;
  const uint32_t e = *epoch + 1;
  const int64_t b = *p.batch[rank];
  const int64_t* l = p.lengths[rank] + f * b;
  int64_t v = 0;
  for (int64_t i = threadIdx.x; i < b; i += kPublishThreads) v += l[i];
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t s = 0;
    for (int w = 0; w < kPublishThreads / 32; ++w) s += partial[w];
    sums[(e & 1) * features + f] = s;
    for (int q = 0; q < world; ++q)
      if (q != rank) kf_signal(p.pad[q] + f * world + rank, e);
  }
}

// Dynamic shared memory: ids[W * F] (ids of feature f on rank s at [s * F + f]).
__global__ void __launch_bounds__(kPlanThreads)
    Plan(Peers p, Split split, int rank, int world, int features, uint32_t* epoch, Copy* copies,
         int64_t* total, Outputs out) {
  extern __shared__ int64_t ids[];
  __shared__ int64_t batch[KF_MAX_RANKS];
  __shared__ int64_t first[KF_MAX_RANKS][64];  // where feature off_r + k starts on rank s (k < 64)
  const uint32_t e = *epoch + 1;
  const int slot = e & 1;
  for (int i = threadIdx.x; i < features * world; i += kPlanThreads) {
    const int f = i / world, s = i % world;
    if (s != rank) kf_wait(p.pad[rank] + f * world + s, e);
    ids[s * features + f] = p.sums[s][slot * features + f];
  }
  if (threadIdx.x < world) batch[threadIdx.x] = *p.batch[threadIdx.x];
  __syncthreads();
  const int64_t off = split.offset[rank], local = split.count[rank];
  if (threadIdx.x < world) {  // thread s: the starts of this rank's features on rank s
    const int s = threadIdx.x;
    int64_t at = 0;
    for (int64_t f = 0; f < off + local; ++f) {
      if (f >= off) first[s][f - off] = at;
      at += ids[s * features + f];
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t stride = 0;
    for (int s = 0; s < world; ++s) stride += batch[s];
    // Lengths: entries [0, F_r * stride); ids after them.
    const int n = static_cast<int>(local) * world;
    int64_t at = 0;
    for (int j = 0; j < n; ++j) {
      const int k = j / world, s = j % world;
      copies[j] = {p.lengths[s] + (off + k) * batch[s], out.lengths + at, at};
      at += batch[s];
    }
    const int64_t lengths_total = at;
    for (int j = 0; j < n; ++j) {
      const int k = j / world, s = j % world;
      copies[n + j] = {p.values[s] + first[s][k], out.values + (at - lengths_total), at};
      at += ids[s * features + off + k];
    }
    *total = at;
    *out.stride = stride;
    for (int s = 0; s < world; ++s) out.per_rank[s] = batch[s];
    *out.lengths_count = lengths_total;
    *out.values_count = at - lengths_total;
    *epoch = e;
  }
}

__device__ __forceinline__ void CopyRange(const int64_t* __restrict__ src,
                                          int64_t* __restrict__ dst, int64_t n) {
  const int t = threadIdx.x;
  if (((reinterpret_cast<uintptr_t>(src) ^ reinterpret_cast<uintptr_t>(dst)) & 15) == 0) {
    // Equally aligned: one entry to reach 16 bytes, pairs, one entry left over.
    const int64_t head = (reinterpret_cast<uintptr_t>(dst) & 15) != 0 && n > 0 ? 1 : 0;
    if (head && t == 0) dst[0] = src[0];
    const int64_t pairs = (n - head) / 2;
    const longlong2* s2 = reinterpret_cast<const longlong2*>(src + head);
    longlong2* d2 = reinterpret_cast<longlong2*>(dst + head);
    for (int64_t i = t; i < pairs; i += kCopyThreads) d2[i] = s2[i];
    if ((n - head) % 2 != 0 && t == kCopyThreads - 1) dst[n - 1] = src[n - 1];
  } else {
    int64_t i = t;
    for (; i + 3 * kCopyThreads < n; i += 4 * kCopyThreads) {
      const int64_t a = src[i], b = src[i + kCopyThreads], c = src[i + 2 * kCopyThreads],
                    d = src[i + 3 * kCopyThreads];
      dst[i] = a;
      dst[i + kCopyThreads] = b;
      dst[i + 2 * kCopyThreads] = c;
      dst[i + 3 * kCopyThreads] = d;
    }
    for (; i < n; i += kCopyThreads) dst[i] = src[i];
  }
}

// Dynamic shared memory: the copies (n of them) and their starts, start[n] = total.
__global__ void __launch_bounds__(kCopyThreads)
    CopyAll(const Copy* __restrict__ copies, const int64_t* __restrict__ total_ptr, int n) {
  extern __shared__ int64_t smem[];
  int64_t* start = smem;  // [n + 1]
  const int64_t** src = reinterpret_cast<const int64_t**>(start + n + 1);
  int64_t** dst = reinterpret_cast<int64_t**>(start + n + 1 + n);
  const int64_t total = *total_ptr;
  for (int j = threadIdx.x; j < n; j += kCopyThreads) {
    start[j] = copies[j].start;
    src[j] = copies[j].src;
    dst[j] = copies[j].dst;
  }
  if (threadIdx.x == 0) start[n] = total;
  __syncthreads();
  for (int64_t lo = blockIdx.x * kChunk; lo < total;
       lo += static_cast<int64_t>(gridDim.x) * kChunk) {
    const int64_t hi = lo + kChunk < total ? lo + kChunk : total;
    int a = 0, b = n;  // the last copy with start <= lo (it is the non-empty one holding lo)
    while (b - a > 1) {
      const int m = (a + b) / 2;
      if (start[m] <= lo)
        a = m;
      else
        b = m;
    }
    for (int j = a; j < n && start[j] < hi; ++j) {
      const int64_t from = start[j] > lo ? start[j] : lo;
      const int64_t to = start[j + 1] < hi ? start[j + 1] : hi;
      if (to > from) CopyRange(src[j] + (from - start[j]), dst[j] + (from - start[j]), to - from);
    }
  }
}

struct State {
  uint32_t* epoch = nullptr;
  int blocks = 0;
};

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int world = ctx->world_size;
  if (world < 1 || world > KF_MAX_RANKS) return 1;
  const Split split = MakeSplit(world, static_cast<int64_t>(kf_param(ctx, "nf", -1)),
                                static_cast<int64_t>(kf_param(ctx, "u", -1)));
  const int64_t features = split.offset[world];
  // Limits of this kernel: the flags fit the pad, the plan's and the copy's tables fit shared
  // memory (48 KiB, of which Plan's static tables take 8.3 KiB).
  const int64_t copies = 2 * split.count[ctx->rank] * world;
  if (features < 1 || features * world * 4 > static_cast<int64_t>(ctx->signal_pad.nbytes) ||
      features * world * 8 > 32 * 1024 || split.count[ctx->rank] > 64 ||
      8 * (copies + 1) + 16 * copies > 48 * 1024)
    return 1;
  State* st = new State;
  st->blocks = ctx->emulated ? 8 : 4 * ctx->gpu.sm_count;
  if (cudaMalloc(&st->epoch, sizeof(uint32_t)) != cudaSuccess ||
      cudaMemsetAsync(st->epoch, 0, sizeof(uint32_t), ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
    cudaFree(st->epoch);
    delete st;
    return 1;
  }
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor* lengths = kf_input(ctx, "lengths");
  const kf_tensor* values = kf_input(ctx, "values");
  const kf_tensor* batch_size = kf_input(ctx, "batch_size");
  Outputs out = {};
  const kf_tensor* out_lengths = kf_output(ctx, "recv_lengths");
  const kf_tensor* out_values = kf_output(ctx, "recv_values");
  const kf_tensor* stride = kf_output(ctx, "stride");
  const kf_tensor* per_rank = kf_output(ctx, "stride_per_rank");
  const kf_tensor* lengths_count = kf_output(ctx, "lengths_count");
  const kf_tensor* values_count = kf_output(ctx, "values_count");
  if (st == nullptr || !lengths || !values || !batch_size || !out_lengths || !out_values ||
      !stride || !per_rank || !lengths_count || !values_count)
    return 1;
  out = {static_cast<int64_t*>(out_lengths->data),   static_cast<int64_t*>(out_values->data),
         static_cast<int64_t*>(stride->data),        static_cast<int64_t*>(per_rank->data),
         static_cast<int64_t*>(lengths_count->data), static_cast<int64_t*>(values_count->data)};
  const int world = ctx->world_size, rank = ctx->rank;
  const Split split = MakeSplit(world, static_cast<int64_t>(kf_param(ctx, "nf", -1)),
                                static_cast<int64_t>(kf_param(ctx, "u", -1)));
  const int features = static_cast<int>(split.offset[world]);
  const int n = 2 * static_cast<int>(split.count[rank]) * world;

  // Workspace (symmetric): 2 slots of F sums | the copies | the total.
  char* ws = static_cast<char*>(ctx->workspace.data);
  const size_t sums_bytes = Align(16 * static_cast<size_t>(features));
  Copy* copies = reinterpret_cast<Copy*>(ws + sums_bytes);
  int64_t* total = reinterpret_cast<int64_t*>(ws + sums_bytes + Align(sizeof(Copy) * n));
  if (reinterpret_cast<char*>(total + 1) > ws + ctx->workspace.nbytes) return 1;
  Peers p = {};
  for (int q = 0; q < world; ++q) {
    p.lengths[q] = static_cast<const int64_t*>(lengths->peers[q]);
    p.values[q] = static_cast<const int64_t*>(values->peers[q]);
    p.batch[q] = static_cast<const int64_t*>(batch_size->peers[q]);
    p.sums[q] = static_cast<const int64_t*>(ctx->workspace.peers[q]);
    p.pad[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
  }

  Publish<<<features, kPublishThreads, 0, ctx->stream>>>(p, rank, world, features, st->epoch,
                                                         reinterpret_cast<int64_t*>(ws));
  Plan<<<1, kPlanThreads, sizeof(int64_t) * features * world, ctx->stream>>>(
      p, split, rank, world, features, st->epoch, copies, total, out);
  if (n > 0) {
    const int64_t capacity = out_lengths->numel + out_values->numel;
    int64_t blocks = (capacity + kChunk - 1) / kChunk;
    if (blocks > st->blocks) blocks = st->blocks;
    if (blocks < 1) blocks = 1;
    const size_t smem = sizeof(int64_t) * (n + 1) + 2 * sizeof(void*) * n;
    CopyAll<<<static_cast<unsigned>(blocks), kCopyThreads, smem, ctx->stream>>>(copies, total, n);
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (cudaFree(st->epoch) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
