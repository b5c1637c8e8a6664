// Distributed sample sort baseline, as PKB's reference does it (torch.sort and
// torch.distributed collectives), on the harness collectives:
//   1. sort this rank's keys (CUB radix sort, into the workspace);
//   2. take kSamples regular samples of them, each tagged with its rank and its
//      position: (key, rank, position) orders all keys totally, so a run of equal
//      keys splits between buckets like distinct keys do (PKB's tie-break). An
//      empty rank sends padding that sorts after every real sample;
//   3. all-gather the samples (kf_all_gather); every rank sorts the W * kSamples
//      samples the same way and takes the same W - 1 splitters, evenly spaced
//      among the real ones;
//   4. bucket p, for rank p, is the keys between splitters p and p + 1 in that
//      order: one binary search per splitter in the sorted keys, whose buckets are
//      then already contiguous;
//   5. the counts: a kf_all_to_all of one count per peer, copied to the host
//      (PyTorch's .tolist()), then a kf_all_to_allv of the buckets;
//   6. sort the received bucket. The buckets in rank order are now all keys in
//      order, but their sizes follow the samples, not the balanced split;
//   7. exact rebalance: kf_all_gather of the bucket sizes, to the host, which
//      works out which part of the global order every rank holds and which slice
//      it must end with, and a second kf_all_to_allv straight into y.
// Two host round trips, as in PKB. PKB takes W samples per rank (the ends of W
// equal parts); kSamples = 64 gives buckets closer to the slices, so that the
// rebalance moves fewer keys, at no cost worth counting. (cub::DeviceRadixSort
// imports cudaSetDevice, which the harness refuses in candidates' kernels; the
// reference is trusted code and is not held to that rule.)
//
// Buffers: the workspace holds the samples, the counts and three key buffers of
// W * (len + 1) >= total keys each (sorted keys, received bucket, CUB's second
// buffer: one bucket may hold every key); CUB's temporary storage is allocated
// in kf_setup for that many keys.
#include <cuda_bf16.h>
#include <stdint.h>

#include <algorithm>
#include <climits>
#include <cub/cub.cuh>
#include <vector>

#include "kforge/kernel.h"

namespace {

constexpr int kSamples = 64;                // per rank; W * kSamples <= 1024, one block
constexpr unsigned long long kPad = ~0ull;  // an empty rank's samples, after every real one

// A key's bits as an unsigned integer ordered like the key (CUB's radix
// transform: negative keys flip every bit, the others the sign bit).
__device__ __forceinline__ uint32_t Ordered(float k) {
  const uint32_t b = __float_as_uint(k);
  return b ^ ((b >> 31) ? 0xffffffffu : 0x80000000u);
}
__device__ __forceinline__ uint32_t Ordered(__nv_bfloat16 k) {
  const uint32_t b = __bfloat16_as_ushort(k);
  return b ^ ((b >> 15) ? 0xffffu : 0x8000u);
}

// A sample (key, rank, position) as two words compared in order:
// x = ordered key << 32 | rank, y = position in the rank's sorted keys.
__device__ __forceinline__ bool Less(ulonglong2 a, ulonglong2 b) {
  return a.x < b.x || (a.x == b.x && a.y < b.y);
}

// Number of keys of sorted[0, n) below v (lower) or at most v (upper).
template <typename T>
__device__ int64_t Rank(const T* sorted, int64_t n, uint32_t v, bool upper) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    const uint32_t k = Ordered(sorted[mid]);
    if (k < v || (upper && k == v)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Sample i is the key at the middle of the i-th of kSamples equal parts.
template <typename T>
__global__ void TakeSamples(const T* sorted, int64_t n, int rank, ulonglong2* out) {
  const int i = threadIdx.x;
  if (n == 0) {
    out[i] = make_ulonglong2(kPad, kPad);
    return;
  }
  const int64_t p = (2 * i + 1) * n / (2 * kSamples);
  out[i] = make_ulonglong2(static_cast<unsigned long long>(Ordered(sorted[p])) << 32 |
                               static_cast<unsigned long long>(rank),
                           static_cast<unsigned long long>(p));
}

// One thread per gathered sample: its place among all of them (equal samples,
// from ranks with fewer keys than samples, by index), the splitters, then this
// rank's bucket boundaries and send counts.
template <typename T>
__global__ void __launch_bounds__(1024)
    ChooseSplitters(const ulonglong2* gathered, int count, const T* sorted, int64_t n, int rank,
                    int world, long long* send_counts) {
  __shared__ ulonglong2 all[1024];
  __shared__ ulonglong2 order[1024];
  __shared__ int64_t bound[KF_MAX_RANKS + 1];
  const int t = threadIdx.x;
  const ulonglong2 mine = gathered[t];
  all[t] = mine;
  __syncthreads();
  int place = 0;
  for (int u = 0; u < count; ++u) {
    const ulonglong2 s = all[u];
    place += Less(s, mine) || (s.x == mine.x && s.y == mine.y && u < t);
  }
  order[place] = mine;
  const int real = __syncthreads_count(mine.x != kPad);
  if (t == 0) {
    bound[0] = 0;
    bound[world] = n;
  }
  if (t >= 1 && t < world) {
    int64_t b = 0;  // no real sample: every key goes to the last rank (there are none)
    if (real > 0) {
      // Splitter t: keys at or after it in (key, rank, position) order go to rank >= t.
      const ulonglong2 s = order[t * real / world];
      const uint32_t v = static_cast<uint32_t>(s.x >> 32);
      const int owner = static_cast<int>(s.x & 0xffffffffu);
      if (owner == rank) {
        b = static_cast<int64_t>(s.y);  // this rank's keys before the splitter itself
      } else {
        b = Rank(sorted, n, v, /*upper=*/rank < owner);  // equal keys: by rank
      }
    }
    bound[t] = b;
  }
  __syncthreads();
  if (t < world) send_counts[t] = bound[t + 1] - bound[t];
}

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

// The workspace, carved in order.
struct Layout {
  ulonglong2* mine;        // this rank's samples
  ulonglong2* gathered;    // every rank's, rank-major
  long long* send_counts;  // [W] keys of this rank's sorted keys for each rank
  long long* recv_counts;  // [W] keys each rank sends here
  long long* size_mine;    // [1] this rank's bucket
  long long* sizes;        // [W] every rank's bucket
  char* sorted;            // the three key buffers, cap keys each
  char* bucket;
  char* alt;
  size_t bytes;
};

Layout Carve(const kf_ctx* ctx, int64_t cap, size_t elem) {
  const size_t w = static_cast<size_t>(ctx->world_size);
  char* base = static_cast<char*>(ctx->workspace.data);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* p = base + off;
    off += Align(bytes);
    return p;
  };
  Layout l;
  l.mine = reinterpret_cast<ulonglong2*>(take(sizeof(ulonglong2) * kSamples));
  l.gathered = reinterpret_cast<ulonglong2*>(take(sizeof(ulonglong2) * kSamples * w));
  l.send_counts = reinterpret_cast<long long*>(take(8 * w));
  l.recv_counts = reinterpret_cast<long long*>(take(8 * w));
  l.size_mine = reinterpret_cast<long long*>(take(8));
  l.sizes = reinterpret_cast<long long*>(take(8 * w));
  l.sorted = take(static_cast<size_t>(cap) * elem);
  l.bucket = take(static_cast<size_t>(cap) * elem);
  l.alt = take(static_cast<size_t>(cap) * elem);
  l.bytes = off;
  return l;
}

struct State {
  void* temp = nullptr;  // CUB's temporary storage
  size_t temp_bytes = 0;
  int64_t cap = 0;            // keys each key buffer holds: W * (len + 1) >= total
  long long* host = nullptr;  // pinned: send counts [W], recv counts [W], bucket size, sizes [W]
  std::vector<size_t> sc, sd, rc, rd;
};

template <typename T>
int TempBytes(int64_t n, int64_t cap, size_t* bytes) {
  size_t a = 0, b = 0;
  if (cub::DeviceRadixSort::SortKeys(nullptr, a, static_cast<const T*>(nullptr),
                                     static_cast<T*>(nullptr), static_cast<int>(n)) != cudaSuccess)
    return 1;
  cub::DoubleBuffer<T> keys(nullptr, nullptr);
  if (cub::DeviceRadixSort::SortKeys(nullptr, b, keys, static_cast<int>(cap)) != cudaSuccess)
    return 1;
  *bytes = std::max<size_t>({a, b, 1});
  return 0;
}

template <typename T>
int Run(kf_ctx* ctx, State* st) {
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  const int w = ctx->world_size, rank = ctx->rank;
  const int64_t n = x.numel, len = y.numel;
  cudaStream_t stream = ctx->stream;
  const Layout l = Carve(ctx, st->cap, sizeof(T));
  T* sorted = reinterpret_cast<T*>(l.sorted);
  size_t temp_bytes = st->temp_bytes;

  // 1-4: local sort, samples, splitters, send counts.
  if (n > 0 && cub::DeviceRadixSort::SortKeys(
                   st->temp, temp_bytes, static_cast<const T*>(x.data), sorted, static_cast<int>(n),
                   0, static_cast<int>(8 * sizeof(T)), stream) != cudaSuccess)
    return 1;
  TakeSamples<T><<<1, kSamples, 0, stream>>>(sorted, n, rank, l.mine);
  if (kf_all_gather(ctx, l.mine, l.gathered, 2 * kSamples, KF_I64) != 0) return 1;
  ChooseSplitters<T>
      <<<1, w * kSamples, 0, stream>>>(l.gathered, w * kSamples, sorted, n, rank, w, l.send_counts);
  if (cudaGetLastError() != cudaSuccess) return 1;

  // 5: counts to the host, the buckets to their ranks.
  if (kf_all_to_all(ctx, l.send_counts, l.recv_counts, 1, KF_I64) != 0) return 1;
  long long* h = st->host;
  if (cudaMemcpyAsync(h, l.send_counts, 8 * w, cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
      cudaMemcpyAsync(h + w, l.recv_counts, 8 * w, cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess)
    return 1;
  size_t sent = 0, got = 0;
  for (int p = 0; p < w; ++p) {
    if (h[p] < 0 || h[w + p] < 0) return 1;
    st->sc[p] = static_cast<size_t>(h[p]);
    st->rc[p] = static_cast<size_t>(h[w + p]);
    st->sd[p] = sent;
    st->rd[p] = got;
    sent += st->sc[p];
    got += st->rc[p];
  }
  if (sent != static_cast<size_t>(n) || got > static_cast<size_t>(st->cap)) return 1;
  if (kf_all_to_allv(ctx, sorted, st->sc.data(), st->sd.data(), l.bucket, st->rc.data(),
                     st->rd.data(), x.dtype) != 0)
    return 1;

  // 6: sort the bucket (CUB ping-pongs between bucket and alt; Current() has it).
  cub::DoubleBuffer<T> keys(reinterpret_cast<T*>(l.bucket), reinterpret_cast<T*>(l.alt));
  if (got > 0 &&
      cub::DeviceRadixSort::SortKeys(st->temp, temp_bytes, keys, static_cast<int>(got), 0,
                                     static_cast<int>(8 * sizeof(T)), stream) != cudaSuccess)
    return 1;
  const T* bucket = keys.Current();

  // 7: every rank's bucket size, then each rank's slice from the buckets that hold it.
  h[2 * w] = static_cast<long long>(got);
  if (cudaMemcpyAsync(l.size_mine, h + 2 * w, 8, cudaMemcpyHostToDevice, stream) != cudaSuccess)
    return 1;
  if (kf_all_gather(ctx, l.size_mine, l.sizes, 1, KF_I64) != 0) return 1;
  const long long* sizes = h + 2 * w + 1;
  if (cudaMemcpyAsync(h + 2 * w + 1, l.sizes, 8 * w, cudaMemcpyDeviceToHost, stream) !=
          cudaSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess)
    return 1;
  std::vector<int64_t> held(w + 1, 0);  // bucket p holds global positions [held[p], held[p+1])
  for (int p = 0; p < w; ++p) held[p + 1] = held[p] + sizes[p];
  const int64_t total = held[w];
  const int64_t base = total / w, extra = total % w;
  auto start = [&](int r) { return r * base + std::min<int64_t>(r, extra); };
  auto count = [&](int r) { return base + (r < extra ? 1 : 0); };
  if (count(rank) != len) return 1;  // the task's output shape disagrees
  for (int p = 0; p < w; ++p) {
    // Sent: the part of this rank's bucket inside rank p's slice.
    int64_t lo = std::max(held[rank], start(p)), hi = std::min(held[rank + 1], start(p) + count(p));
    st->sc[p] = hi > lo ? static_cast<size_t>(hi - lo) : 0;
    st->sd[p] = hi > lo ? static_cast<size_t>(lo - held[rank]) : 0;
    // Received: the part of rank p's bucket inside this rank's slice.
    lo = std::max(held[p], start(rank));
    hi = std::min(held[p + 1], start(rank) + len);
    st->rc[p] = hi > lo ? static_cast<size_t>(hi - lo) : 0;
    st->rd[p] = hi > lo ? static_cast<size_t>(lo - start(rank)) : 0;
  }
  if (kf_all_to_allv(ctx, bucket, st->sc.data(), st->sd.data(), y.data, st->rc.data(),
                     st->rd.data(), y.dtype) != 0)
    return 1;
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->num_inputs < 1 || ctx->num_outputs < 1) return 1;
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& y = ctx->outputs[0];
  const int w = ctx->world_size;
  if (w < 1 || w > KF_MAX_RANKS || w * kSamples > 1024) return 1;
  if (x.dtype != y.dtype || (x.dtype != KF_F32 && x.dtype != KF_BF16)) return 2;
  State* st = new State;
  ctx->user = st;
  // len_r >= floor(total / W) on every rank, so W * (len_r + 1) > total: room for any bucket.
  st->cap = static_cast<int64_t>(w) * (y.numel + 1);
  if (st->cap > INT_MAX || x.numel > st->cap) return 1;
  const size_t elem = kf_dtype_size(x.dtype);
  if (Carve(ctx, st->cap, elem).bytes > ctx->workspace.nbytes) return 1;
  const int rc = x.dtype == KF_F32 ? TempBytes<float>(x.numel, st->cap, &st->temp_bytes)
                                   : TempBytes<__nv_bfloat16>(x.numel, st->cap, &st->temp_bytes);
  if (rc != 0 || cudaMalloc(&st->temp, st->temp_bytes) != cudaSuccess) return 1;
  if (cudaMallocHost(&st->host, sizeof(long long) * (3 * w + 1)) != cudaSuccess) return 1;
  for (auto* v : {&st->sc, &st->sd, &st->rc, &st->rd}) v->resize(w);
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 1;
  return ctx->inputs[0].dtype == KF_F32 ? Run<float>(ctx, st) : Run<__nv_bfloat16>(ctx, st);
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (st->temp != nullptr && cudaFree(st->temp) != cudaSuccess) rc = 1;
  if (st->host != nullptr && cudaFreeHost(st->host) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
