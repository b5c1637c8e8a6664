// Distributed sort with no host round trip: for f32 a sample sort whose bucket
// exchange and exact rebalance are peer stores, for bf16 a counting sort.
//
// f32. The baseline sorts its keys, samples them, sends the counts through the
// host, all-to-alls the buckets, sorts them again, and rebalances them with a
// second host trip and all-to-all. Here:
//   1. every rank publishes its length and S = 4096 / W regular samples of its
//      (unsorted) keys in its workspace (all its keys if it has fewer); barrier;
//   2. every rank reads all samples and sorts them in one block
//      (cub::BlockRadixSort on the key bits only: it is stable, so equal keys
//      stay in (rank, position) order) and takes the same W - 1 splitters.
//      (key, rank, position) orders all keys totally, so a run of equal keys
//      splits between buckets like distinct keys do. Bucket j, for rank j, is
//      the keys from splitter j (included) to splitter j + 1 in that order;
//   3. one pass over the keys: each key's bucket by comparison with the
//      splitters; a block groups its 4096-key tile by bucket in shared memory,
//      reserves room with one atomic per bucket and stores each group, coalesced,
//      into the bucket owner's receive buffer (peer stores), inside the region of
//      that buffer that belongs to this rank: rank q's region starts at
//      n_0 + ... + n_{q-1}, so no count exchange has to come first. Then it
//      publishes how many keys it sent to each rank; barrier;
//   4. every rank reads the W x W counts: where its bucket's pieces lie in its
//      buffer, how many keys it holds and where its bucket starts in the global
//      order (the buckets in rank order are all keys in order);
//   5. an LSD radix sort of the bucket: 4 passes of 8 bits of the key's
//      order-preserving bits, each a per-block digit histogram, a scan (a warp
//      per digit) and a stable scatter of 4096-key tiles ranked by
//      cub::BlockRadixSort. The first pass reads the pieces where they landed;
//      the last writes every key at its global position: into this rank's y or,
//      for the keys at the ends of the bucket that belong to a neighbour's slice,
//      into the neighbour's y (peer stores), so the exact rebalance costs nothing
//      beyond that pass; end barrier.
//   One read of the keys, one store of them across the links and one sort (4
//   passes), against the baseline's two sorts, two all-to-alls and two host
//   round trips. The samples only balance the buckets (within a few percent at
//   these sample counts); the result is exact whatever they are.
//
// bf16. A key has 2^16 possible values, so the global histogram of the values is
// the sorted sequence. Every rank counts its keys per value (16-bit counters
// packed two to a word in shared memory, flushed every 65528 keys), barrier;
// every rank sums the W histograms, scans them (a block scan per 256 values,
// then each block adds the totals before it) and writes its slice from the
// prefix sums, 8 keys per 16-byte store. No key crosses a link.
//
// CUB's device-wide algorithms (cub::DeviceRadixSort, DeviceScan) are not used:
// they import cudaSetDevice, which the harness refuses in any kernel. Its block
// primitives are plain device code.
//
// Synchronisation: barriers through the signal pad (slot [b * 8 + src] of the
// receiver's pad for barrier b), with an epoch that grows by one per call (a host
// counter; every rank makes the same calls); a barrier fences first, so the
// peer stores of the kernels before it are visible with its flag. f32: barrier
// 0 after the samples, 1 after the stores into receive buffers, 2 after the
// stores into outputs. No start barrier is needed: a rank reads only its own x,
// and peers read its samples and counts, and store into its receive buffer and
// y, only after barriers of the same call. It rewrites its samples and counts in
// the next call only after passing this call's barrier 2, which no peer signals
// before those reads. A peer stores into its receive buffer in the next call
// only after that call's barrier 0, which this rank signals only after its sort
// has read the buffer. A peer stores into its y only after barrier 1, so the
// rank is in the call (its y already poisoned for it), and barrier 2 keeps the
// rank from returning before those stores are done. bf16: one barrier, after the
// histograms. A rank clears its histogram for call k + 1 while a peer may still
// be summing call k's, so histograms alternate between two buffers by call
// parity: the one cleared in call k + 1 was last read in call k - 1, before the
// peers' barrier of call k that this rank has passed.
#include <cuda_bf16.h>
#include <stdint.h>

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

#include "kforge/kernel.h"

namespace {

constexpr int kMaxWorld = 8;
constexpr int kThreads = 512;  // push and sort blocks
constexpr int kItems = 8;
constexpr int kTile = kThreads * kItems;  // 4096 keys
constexpr int kSampleBudget = 4096;       // samples over all ranks: one 512 x 8 block sort
// LSD passes of 8 bits: a 4096-key tile then holds runs of 16 keys per digit on
// average, so the scatter's stores stay coalesced (11-bit digits would save a
// pass but leave runs of 2).
constexpr int kRadixBits = 8;
constexpr int kRadix = 1 << kRadixBits;
constexpr int kPasses = 32 / kRadixBits;

// Workspace layout (the same on every rank). f32: published length, counts and
// samples, then the receive buffer and the sort's second buffer. bf16: two
// histograms of 65536 counts.
constexpr size_t kOffLength = 0;
constexpr size_t kOffCounts = 256;
constexpr size_t kOffSamples = 512;
constexpr size_t kOffRecv = 64 << 10;
constexpr size_t kOffHist = 0;
constexpr int kValues = 1 << 16;

// Barrier slots: pad[(b * kMaxWorld + src)].
constexpr int kBarSamples = 0, kBarPushed = 1, kBarDone = 2, kBarHist = 3;

// bf16 histogram: chunks of at most 65535 keys keep a 16-bit counter from
// overflowing; a multiple of 8 keeps 16-byte loads aligned.
constexpr int kHistThreads = 1024;
constexpr int kHistChunk = 65528;
constexpr int kPrefixThreads = 256;
static_assert(kValues / kPrefixThreads == kPrefixThreads, "PrefixBf16 scans one total per thread");
constexpr int kExpandThreads = 256;
constexpr int kExpandTile = kExpandThreads * 8;

struct Peers {
  char* ws[kMaxWorld];
  uint32_t* pad[kMaxWorld];
  void* y[kMaxWorld];
};

// What the kernels of one f32 call work out and share (device memory).
struct Plan {
  unsigned long long n[kMaxWorld];              // keys of rank q
  unsigned long long region[kMaxWorld];         // rank q's region in every receive buffer
  unsigned long long slice[kMaxWorld + 1];      // start_r; slice[W] = total
  unsigned int split_value[kMaxWorld];          // splitter j (1 <= j < W): ordered key,
  int split_rank[kMaxWorld];                    // its rank,
  unsigned long long split_index[kMaxWorld];    // and its position there
  unsigned long long seg_off[kMaxWorld];        // piece from rank q: receive buffer offset,
  unsigned long long seg_start[kMaxWorld + 1];  // and first position in the bucket
  unsigned long long held;                      // keys in this rank's bucket
  unsigned long long bucket_start;              // global position of its first key
};

// ---------------------------------------------------------------- key bits ---

// Bits ordered like the key (radix sort's transform): negative keys flip every
// bit, the others the sign bit. -0 sorts before +0; they compare equal anyway.
__device__ __forceinline__ uint32_t Ordered(uint32_t bits) {
  return bits ^ ((bits >> 31) ? 0xffffffffu : 0x80000000u);
}
__device__ __forceinline__ uint32_t Unordered(uint32_t o) {
  return o ^ ((o >> 31) ? 0x80000000u : 0xffffffffu);
}
__device__ __forceinline__ uint32_t Ordered16(uint32_t bits) {
  return bits ^ ((bits >> 15) ? 0xffffu : 0x8000u);
}
__device__ __forceinline__ uint32_t Unordered16(uint32_t o) {
  return o ^ ((o >> 15) ? 0x8000u : 0xffffu);
}

// Position of sample s of a rank with n keys that takes `taken` samples: the
// middle of the s-th of `taken` equal parts (every key when n < S).
__device__ __forceinline__ unsigned long long SamplePosition(unsigned long long s,
                                                             unsigned long long n,
                                                             unsigned long long taken) {
  return (2 * s + 1) * n / (2 * taken);
}

// ----------------------------------------------------------------- barrier ---

// Thread q (q != rank) raises this rank's flag in q's pad and waits for q's in
// its own. The fence makes this rank's earlier stores (peer stores included, by
// the kernels before this one) visible before the flag.
__global__ void Barrier(Peers p, int slot, int rank, int world, uint32_t epoch) {
  const int q = threadIdx.x;
  if (q < world && q != rank) {
    __threadfence_system();
    kf_signal(p.pad[q] + slot * kMaxWorld + rank, epoch);
    kf_wait(p.pad[rank] + slot * kMaxWorld + q, epoch);
  }
}

// ------------------------------------------------------------- f32: samples ---

__global__ void PublishSamples(const uint32_t* x, long long n, int rank, int samples, char* ws) {
  const unsigned long long taken = n < samples ? n : samples;
  if (threadIdx.x == 0) *reinterpret_cast<unsigned long long*>(ws + kOffLength) = n;
  auto* out = reinterpret_cast<unsigned long long*>(ws + kOffSamples);
  for (unsigned long long s = threadIdx.x; s < taken; s += blockDim.x) {
    const uint32_t key = Ordered(x[SamplePosition(s, n, taken)]);
    out[s] = static_cast<unsigned long long>(key) << 32 |
             static_cast<unsigned long long>(rank) << 16 | s;
  }
}

// One block of kThreads: every rank's samples, sorted on the key bits (stable,
// so equal keys keep rank-major, position-minor order), then the splitters and
// everything else that depends only on the lengths.
__global__ void __launch_bounds__(kThreads)
    ChooseSplitters(Peers p, int world, int samples, Plan* plan) {
  using Sort = cub::BlockRadixSort<unsigned long long, kThreads, kItems>;
  __shared__ typename Sort::TempStorage temp;
  __shared__ unsigned long long n[kMaxWorld], taken_before[kMaxWorld + 1];
  const int t = threadIdx.x;
  if (t < world) n[t] = *reinterpret_cast<const unsigned long long*>(p.ws[t] + kOffLength);
  __syncthreads();
  if (t == 0) {
    unsigned long long before = 0, region = 0;
    taken_before[0] = 0;
    for (int q = 0; q < world; ++q) {
      plan->n[q] = n[q];
      plan->region[q] = region;
      region += n[q];
      before += n[q] < static_cast<unsigned long long>(samples) ? n[q] : samples;
      taken_before[q + 1] = before;
    }
    const unsigned long long total = region, base = total / world, extra = total % world;
    for (int r = 0; r <= world; ++r) {
      const unsigned long long ur = static_cast<unsigned long long>(r);
      plan->slice[r] = r == world ? total : ur * base + (ur < extra ? ur : extra);
    }
  }
  __syncthreads();
  // Blocked arrangement: thread t holds samples t*kItems .. t*kItems+kItems-1 of
  // the concatenation (real ones first, padding after them).
  const unsigned long long real = taken_before[world];
  unsigned long long keys[kItems];
  for (int k = 0; k < kItems; ++k) {
    const unsigned long long i = static_cast<unsigned long long>(t) * kItems + k;
    keys[k] = ~0ull;
    if (i < real) {
      int q = 0;
      while (i >= taken_before[q + 1]) ++q;
      keys[k] =
          reinterpret_cast<const unsigned long long*>(p.ws[q] + kOffSamples)[i - taken_before[q]];
    }
  }
  Sort(temp).Sort(keys, 32, 64);
  // Splitter j is sample j * real / W (real >= 1: rank 0 always has keys).
  for (int k = 0; k < kItems; ++k) {
    const unsigned long long i = static_cast<unsigned long long>(t) * kItems + k;
    for (int j = 1; j < world; ++j) {
      if (i != j * real / world) continue;
      const int q = static_cast<int>(keys[k] >> 16 & 0xffff);
      const unsigned long long s = keys[k] & 0xffff;
      const unsigned long long taken =
          n[q] < static_cast<unsigned long long>(samples) ? n[q] : samples;
      plan->split_value[j] = static_cast<uint32_t>(keys[k] >> 32);
      plan->split_rank[j] = q;
      plan->split_index[j] = SamplePosition(s, n[q], taken);
    }
  }
}

// ---------------------------------------------------------------- f32: push ---

// Bucket of key (v, rank, i): the number of splitters at or before it.
__device__ __forceinline__ int Bucket(uint32_t v, int rank, unsigned long long i, int world,
                                      const uint32_t* sv, const int* sr,
                                      const unsigned long long* si) {
  int b = 0;
  for (int j = 1; j < world; ++j) {
    b += sv[j] < v || (sv[j] == v && (sr[j] < rank || (sr[j] == rank && si[j] <= i)));
  }
  return b;
}

__global__ void __launch_bounds__(kThreads)
    Push(const uint32_t* x, long long n, int rank, int world, const Plan* plan,
         unsigned long long* cursor, Peers p) {
  __shared__ uint32_t sv[kMaxWorld];
  __shared__ int sr[kMaxWorld];
  __shared__ unsigned long long si[kMaxWorld];
  __shared__ int count[kMaxWorld], first[kMaxWorld + 1];
  __shared__ unsigned long long base[kMaxWorld];
  __shared__ uint32_t stage[kTile];
  const int t = threadIdx.x, lane = t % 32;
  if (t < world) {
    sv[t] = plan->split_value[t];
    sr[t] = plan->split_rank[t];
    si[t] = plan->split_index[t];
    count[t] = 0;
  }
  __syncthreads();
  const unsigned long long region = plan->region[rank];
  for (long long t0 = static_cast<long long>(blockIdx.x) * kTile; t0 < n;
       t0 += static_cast<long long>(gridDim.x) * kTile) {
    uint32_t bits[kItems];
    int bucket[kItems], place[kItems];
    for (int k = 0; k < kItems; ++k) {
      const long long i = t0 + k * kThreads + t;  // striped: coalesced loads
      int b = -1;
      bits[k] = 0;
      if (i < n) {
        bits[k] = x[i];
        b = Bucket(Ordered(bits[k]), rank, i, world, sv, sr, si);
      }
      // Place within the tile's group for bucket b: one shared atomic per warp and bucket.
      const unsigned same = __match_any_sync(0xffffffffu, b);
      const int leader = __ffs(same) - 1;
      int got = 0;
      if (lane == leader && b >= 0) got = atomicAdd(&count[b], __popc(same));
      got = __shfl_sync(0xffffffffu, got, leader);
      bucket[k] = b;
      place[k] = got + __popc(same & ((1u << lane) - 1));
    }
    __syncthreads();
    if (t == 0) {
      first[0] = 0;
      for (int b = 0; b < world; ++b) first[b + 1] = first[b] + count[b];
    }
    if (t < world)
      base[t] = count[t] > 0 ? atomicAdd(cursor + t, static_cast<unsigned long long>(count[t])) : 0;
    __syncthreads();
    for (int k = 0; k < kItems; ++k) {
      if (bucket[k] >= 0) stage[first[bucket[k]] + place[k]] = bits[k];
    }
    __syncthreads();
    for (int j = t; j < first[world]; j += kThreads) {
      int b = 0;
      while (j >= first[b + 1]) ++b;
      uint32_t* recv = reinterpret_cast<uint32_t*>(p.ws[b] + kOffRecv);
      recv[region + base[b] + (j - first[b])] = stage[j];
    }
    __syncthreads();
    if (t < world) count[t] = 0;
    __syncthreads();
  }
  __threadfence_system();
}

__global__ void PublishCounts(const unsigned long long* cursor, int world, char* ws) {
  if (threadIdx.x < world)
    reinterpret_cast<unsigned long long*>(ws + kOffCounts)[threadIdx.x] = cursor[threadIdx.x];
}

// Every rank's counts: this rank's pieces and the global place of its bucket.
__global__ void ReceivePlan(Peers p, int rank, int world, Plan* plan) {
  __shared__ unsigned long long c[kMaxWorld][kMaxWorld];  // c[q][d]: rank q's keys for rank d
  const int t = threadIdx.x;
  if (t < world * world) {
    c[t / world][t % world] =
        reinterpret_cast<const unsigned long long*>(p.ws[t / world] + kOffCounts)[t % world];
  }
  __syncthreads();
  if (t != 0) return;
  unsigned long long got = 0, before = 0, all = 0;
  for (int q = 0; q < world; ++q) {
    plan->seg_off[q] = plan->region[q];
    plan->seg_start[q] = got;
    got += c[q][rank];
  }
  plan->seg_start[world] = got;
  for (int d = 0; d < world; ++d) {
    for (int q = 0; q < world; ++q) {
      all += c[q][d];
      if (d < rank) before += c[q][d];
    }
  }
  if (all != plan->slice[world]) __trap();  // every key in exactly one bucket
  plan->held = got;
  plan->bucket_start = before;
}

// ---------------------------------------------------------------- f32: sort ---

// The block's share of the bucket: whole tiles, split evenly over the grid.
__device__ __forceinline__ void BlockRange(unsigned long long m, unsigned long long* begin,
                                           unsigned long long* end) {
  const unsigned long long tiles = (m + kTile - 1) / kTile;
  const unsigned long long per = (tiles + gridDim.x - 1) / gridDim.x;
  const unsigned long long b = blockIdx.x * per * kTile, e = b + per * kTile;
  *begin = b < m ? b : m;
  *end = e < m ? e : m;
}

// Key v of the bucket, as ordered bits. Pass 0 reads the pieces where the peer
// stores left them (raw keys; the tables are in shared memory); later passes a
// contiguous buffer of ordered bits.
struct Source {
  const uint32_t* data;
  bool pieces;
  const unsigned long long* seg_off;    // [W]
  const unsigned long long* seg_start;  // [W + 1]

  __device__ __forceinline__ uint32_t operator()(unsigned long long v) const {
    if (!pieces) return data[v];
    int q = 0;
    while (v >= seg_start[q + 1]) ++q;
    return Ordered(data[seg_off[q] + (v - seg_start[q])]);
  }
};

// Fills the shared tables; the caller synchronises before using the source.
__device__ __forceinline__ Source MakeSource(const Plan* plan, const uint32_t* data, bool pieces,
                                             int world, unsigned long long* seg_off,
                                             unsigned long long* seg_start) {
  if (threadIdx.x < world) seg_off[threadIdx.x] = plan->seg_off[threadIdx.x];
  if (threadIdx.x <= world) seg_start[threadIdx.x] = plan->seg_start[threadIdx.x];
  return Source{data, pieces, seg_off, seg_start};
}

// counts[digit * blocks + block]: the block's keys with that digit.
__global__ void __launch_bounds__(kThreads)
    Upsweep(const Plan* plan, const uint32_t* data, bool pieces, int world, int bit,
            unsigned int* counts) {
  __shared__ unsigned int hist[kRadix];
  __shared__ unsigned long long seg_off[kMaxWorld], seg_start[kMaxWorld + 1];
  for (int d = threadIdx.x; d < kRadix; d += kThreads) hist[d] = 0;
  const Source src = MakeSource(plan, data, pieces, world, seg_off, seg_start);
  __syncthreads();
  unsigned long long begin, end;
  BlockRange(plan->held, &begin, &end);
  for (unsigned long long v = begin + threadIdx.x; v < end; v += kThreads)
    atomicAdd(&hist[src(v) >> bit & (kRadix - 1)], 1u);
  __syncthreads();
  for (int d = threadIdx.x; d < kRadix; d += kThreads) counts[d * gridDim.x + blockIdx.x] = hist[d];
}

// One warp per digit: over the blocks, counts become exclusive prefixes and
// totals[d] their sum.
__global__ void DigitScan(unsigned int* counts, int blocks, int radix, unsigned int* totals) {
  const int d = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (d >= radix) return;  // whole warps: blockDim is a multiple of 32
  unsigned int* c = counts + static_cast<size_t>(d) * blocks;
  unsigned int carry = 0;
  for (int b0 = 0; b0 < blocks; b0 += 32) {
    const int b = b0 + lane;
    const unsigned int v = b < blocks ? c[b] : 0;
    unsigned int incl = v;
    for (int o = 1; o < 32; o <<= 1) {
      const unsigned int u = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += u;
    }
    if (b < blocks) c[b] = carry + incl - v;
    carry += __shfl_sync(0xffffffffu, incl, 31);
  }
  if (lane == 0) totals[d] = carry;
}

// Stable scatter: tile by tile, keys ranked by digit (cub::BlockRadixSort on the
// digit's bits is stable), each run of a digit stored at the block's running
// offset for it. The last pass stores each key at its global position, in the
// y of the rank whose slice holds it.
__global__ void __launch_bounds__(kThreads)
    Downsweep(const Plan* plan, const uint32_t* data, bool pieces, int world, int bit,
              const unsigned int* counts, const unsigned int* totals, uint32_t* out, bool last,
              Peers p) {
  using Sort = cub::BlockRadixSort<uint32_t, kThreads, kItems>;
  using Scan = cub::BlockScan<unsigned int, kThreads>;
  __shared__ union {
    typename Sort::TempStorage sort;
    typename Scan::TempStorage scan;
    uint32_t tile[kTile];
  } s;
  __shared__ unsigned int running[kRadix];
  __shared__ unsigned short start[kRadix];
  __shared__ unsigned long long slice[kMaxWorld + 1], bucket_start;
  __shared__ unsigned long long seg_off[kMaxWorld], seg_start[kMaxWorld + 1];
  const int t = threadIdx.x, mask = kRadix - 1;

  // running[d] = keys of digit < d in the bucket + keys of digit d in earlier blocks.
  unsigned int sum = t < kRadix ? totals[t] : 0;
  Scan(s.scan).ExclusiveSum(sum, sum);
  if (t < kRadix) running[t] = sum + counts[t * gridDim.x + blockIdx.x];
  if (t <= world) slice[t] = plan->slice[t];
  if (t == 0) bucket_start = plan->bucket_start;
  const Source src = MakeSource(plan, data, pieces, world, seg_off, seg_start);
  unsigned long long begin, end;
  BlockRange(plan->held, &begin, &end);
  __syncthreads();

  for (unsigned long long t0 = begin; t0 < end; t0 += kTile) {
    const int n = static_cast<int>(end - t0 < kTile ? end - t0 : kTile);
    // Blocked arrangement (thread t: keys t*kItems ..), so that stability keeps the
    // order of the previous pass; past the end, the largest key sorts last.
    uint32_t keys[kItems];
    if (!pieces && n == kTile) {  // two 16-byte loads (the buffers are 16-byte aligned)
      const uint4* v = reinterpret_cast<const uint4*>(data + t0) + t * 2;
      const uint4 a = v[0], b = v[1];
      keys[0] = a.x, keys[1] = a.y, keys[2] = a.z, keys[3] = a.w;
      keys[4] = b.x, keys[5] = b.y, keys[6] = b.z, keys[7] = b.w;
    } else {
      for (int k = 0; k < kItems; ++k) {
        const int i = t * kItems + k;
        keys[k] = i < n ? src(t0 + i) : 0xffffffffu;
      }
    }
    Sort(s.sort).Sort(keys, bit, bit + kRadixBits);
    __syncthreads();
    for (int k = 0; k < kItems; ++k) s.tile[t * kItems + k] = keys[k];
    __syncthreads();
    for (int i = t; i < n; i += kThreads) {
      const int d = s.tile[i] >> bit & mask;
      if (i == 0 || (s.tile[i - 1] >> bit & mask) != d) start[d] = static_cast<unsigned short>(i);
    }
    __syncthreads();
    for (int i = t; i < n; i += kThreads) {
      const uint32_t key = s.tile[i];
      const int d = key >> bit & mask;
      const unsigned long long pos = running[d] + (i - start[d]);
      if (!last) {
        out[pos] = key;
      } else {
        const unsigned long long g = bucket_start + pos;
        int r = 0;
        while (r + 1 < world && slice[r + 1] <= g) ++r;
        static_cast<uint32_t*>(p.y[r])[g - slice[r]] = Unordered(key);
      }
    }
    __syncthreads();
    for (int i = t; i < n; i += kThreads) {
      const int d = s.tile[i] >> bit & mask;
      if (i == n - 1 || (s.tile[i + 1] >> bit & mask) != d) running[d] += i + 1 - start[d];
    }
    __syncthreads();
  }
  if (last) __threadfence_system();
}

// ------------------------------------------------------- bf16: counting sort ---

// hist[v] += keys of value v (ordered bits), over chunks of kHistChunk keys with
// 16-bit shared counters, two to a word.
__global__ void __launch_bounds__(kHistThreads)
    HistBf16(const uint16_t* x, long long n, unsigned int* hist) {
  extern __shared__ unsigned int packed[];  // kValues / 2 words
  for (int w = threadIdx.x; w < kValues / 2; w += kHistThreads) packed[w] = 0;
  __syncthreads();
  const long long chunks = (n + kHistChunk - 1) / kHistChunk;
  for (long long c = blockIdx.x; c < chunks; c += gridDim.x) {
    const long long begin = c * kHistChunk, end = begin + kHistChunk < n ? begin + kHistChunk : n;
    const long long vectors = (end - begin) / 8;
    const uint4* v = reinterpret_cast<const uint4*>(x + begin);
    for (long long i = threadIdx.x; i < vectors; i += kHistThreads) {
      const uint4 u = v[i];
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
      for (int k = 0; k < 4; ++k) {
        const uint32_t lo = Ordered16(w[k] & 0xffffu), hi = Ordered16(w[k] >> 16);
        atomicAdd(&packed[lo >> 1], (lo & 1) ? 0x10000u : 1u);
        atomicAdd(&packed[hi >> 1], (hi & 1) ? 0x10000u : 1u);
      }
    }
    for (long long i = begin + vectors * 8 + threadIdx.x; i < end; i += kHistThreads) {
      const uint32_t o = Ordered16(x[i]);
      atomicAdd(&packed[o >> 1], (o & 1) ? 0x10000u : 1u);
    }
    __syncthreads();
    for (int w = threadIdx.x; w < kValues / 2; w += kHistThreads) {
      const unsigned int c2 = packed[w];
      if (c2 == 0) continue;
      if (c2 & 0xffffu) atomicAdd(hist + 2 * w, c2 & 0xffffu);
      if (c2 >> 16) atomicAdd(hist + 2 * w + 1, c2 >> 16);
      packed[w] = 0;
    }
    __syncthreads();
  }
}

// Block b, thread t: value v = b * kPrefixThreads + t. local[v] = keys of values
// below v inside the block's range (over all ranks), block_total[b] = the range's.
__global__ void __launch_bounds__(kPrefixThreads)
    SumBf16(Peers p, size_t hist_off, int world, unsigned long long* local,
            unsigned long long* block_total) {
  using Scan = cub::BlockScan<unsigned long long, kPrefixThreads>;
  __shared__ typename Scan::TempStorage temp;
  const int v = blockIdx.x * kPrefixThreads + threadIdx.x;
  unsigned long long c = 0;
  for (int q = 0; q < world; ++q) c += reinterpret_cast<const unsigned int*>(p.ws[q] + hist_off)[v];
  unsigned long long total;
  Scan(temp).ExclusiveSum(c, c, total);
  local[v] = c;
  if (threadIdx.x == 0) block_total[blockIdx.x] = total;
}

// prefix[v] = keys of value < v, for v = 0 .. kValues (prefix[kValues] = total):
// every block scans the block totals itself (kValues / kPrefixThreads of them).
__global__ void __launch_bounds__(kPrefixThreads)
    PrefixBf16(const unsigned long long* local, const unsigned long long* block_total,
               unsigned long long* prefix) {
  using Scan = cub::BlockScan<unsigned long long, kPrefixThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ unsigned long long base;
  const int t = threadIdx.x;
  unsigned long long before, total;
  Scan(temp).ExclusiveSum(block_total[t], before, total);
  if (t == static_cast<int>(blockIdx.x)) base = before;
  if (blockIdx.x == gridDim.x - 1) {  // the extra block: the total
    if (t == 0) prefix[kValues] = total;
    return;
  }
  __syncthreads();
  prefix[blockIdx.x * kPrefixThreads + t] = base + local[blockIdx.x * kPrefixThreads + t];
}

// Largest v in [lo, hi] with prefix[v] <= g (prefix[lo] <= g holds).
__device__ __forceinline__ int ValueAt(const unsigned long long* prefix, unsigned long long g,
                                       int lo, int hi) {
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (prefix[mid] <= g) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// y[i] = the value at global position start + i.
__global__ void __launch_bounds__(kExpandThreads)
    ExpandBf16(const unsigned long long* prefix, int rank, int world, long long len, uint16_t* y) {
  __shared__ int lo, hi;
  const unsigned long long total = prefix[kValues], base = total / world, extra = total % world;
  const unsigned long long r = static_cast<unsigned long long>(rank);
  const unsigned long long start = r * base + (r < extra ? r : extra);
  if (blockIdx.x == 0 && threadIdx.x == 0 &&
      base + (r < extra) != static_cast<unsigned long long>(len))
    __trap();  // the output's shape disagrees with total
  const long long i0 = static_cast<long long>(blockIdx.x) * kExpandTile;
  const long long i1 = i0 + kExpandTile < len ? i0 + kExpandTile : len;
  if (threadIdx.x == 0) {
    lo = ValueAt(prefix, start + i0, 0, kValues - 1);
    hi = ValueAt(prefix, start + i1 - 1, lo, kValues - 1);
  }
  __syncthreads();
  const long long first = i0 + threadIdx.x * 8;
  if (first >= i1) return;
  int v = ValueAt(prefix, start + first, lo, hi);
  uint16_t out[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const unsigned long long g = start + first + k;
    if (first + k < i1) {
      while (prefix[v + 1] <= g) ++v;
    }
    out[k] = static_cast<uint16_t>(Unordered16(v));
  }
  if (first + 8 <= i1) {
    uint4 u;
    u.x = out[0] | static_cast<uint32_t>(out[1]) << 16;
    u.y = out[2] | static_cast<uint32_t>(out[3]) << 16;
    u.z = out[4] | static_cast<uint32_t>(out[5]) << 16;
    u.w = out[6] | static_cast<uint32_t>(out[7]) << 16;
    *reinterpret_cast<uint4*>(y + first) = u;
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (first + k < i1) y[first + k] = out[k];
    }
  }
}

// --------------------------------------------------------------------- host ---

// Keys rounded up to a whole 16-byte vector, so that the buffer after them is aligned.
long long AlignedKeys(long long keys) { return (keys + 3) / 4 * 4; }

struct State {
  uint32_t epoch = 0;
  int sms = 1;
  // f32
  Plan* plan = nullptr;
  unsigned long long* cursor = nullptr;  // keys this rank sent to each rank
  unsigned int* counts = nullptr;        // sort: [kRadix][sort_blocks]
  unsigned int* totals = nullptr;        // sort: [kRadix]
  int sort_blocks = 1;
  long long cap = 0;  // keys a receive buffer holds: W * (len + 1) >= total
  // bf16
  unsigned long long* local = nullptr;        // [kValues]: prefix inside a block's values
  unsigned long long* block_total = nullptr;  // [kValues / kPrefixThreads]
  unsigned long long* prefix = nullptr;       // [kValues + 1]
};

Peers MakePeers(const kf_ctx* ctx) {
  Peers p = {};
  for (int q = 0; q < ctx->world_size; ++q) {
    p.ws[q] = static_cast<char*>(ctx->workspace.peers[q]);
    p.pad[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
    p.y[q] = ctx->outputs[0].peers[q];
  }
  return p;
}

int RunF32(kf_ctx* ctx, State* st, const Peers& p) {
  const kf_tensor& x = ctx->inputs[0];
  const int w = ctx->world_size, rank = ctx->rank;
  const long long n = x.numel;
  const uint32_t e = st->epoch;
  cudaStream_t s = ctx->stream;
  char* ws = static_cast<char*>(ctx->workspace.data);
  uint32_t* recv = reinterpret_cast<uint32_t*>(ws + kOffRecv);
  uint32_t* alt = recv + AlignedKeys(st->cap);
  const uint32_t* keys = static_cast<const uint32_t*>(x.data);
  const int samples = kSampleBudget / w;

  if (cudaMemsetAsync(st->cursor, 0, sizeof(unsigned long long) * kMaxWorld, s) != cudaSuccess)
    return 1;
  PublishSamples<<<1, 256, 0, s>>>(keys, n, rank, samples, ws);
  Barrier<<<1, 32, 0, s>>>(p, kBarSamples, rank, w, e);
  ChooseSplitters<<<1, kThreads, 0, s>>>(p, w, samples, st->plan);
  if (n > 0) {
    const long long tiles = (n + kTile - 1) / kTile;
    const int grid = static_cast<int>(tiles < 2 * st->sms ? tiles : 2 * st->sms);
    Push<<<grid, kThreads, 0, s>>>(keys, n, rank, w, st->plan, st->cursor, p);
  }
  PublishCounts<<<1, 32, 0, s>>>(st->cursor, w, ws);
  Barrier<<<1, 32, 0, s>>>(p, kBarPushed, rank, w, e);
  ReceivePlan<<<1, 64, 0, s>>>(p, rank, w, st->plan);
  // recv (pieces) -> alt -> recv -> alt -> every rank's y.
  for (int pass = 0; pass < kPasses; ++pass) {
    const uint32_t* from = pass % 2 ? alt : recv;
    uint32_t* to = pass % 2 ? recv : alt;
    const int bit = pass * kRadixBits;
    Upsweep<<<st->sort_blocks, kThreads, 0, s>>>(st->plan, from, pass == 0, w, bit, st->counts);
    DigitScan<<<kRadix / 8, 256, 0, s>>>(st->counts, st->sort_blocks, kRadix, st->totals);
    Downsweep<<<st->sort_blocks, kThreads, 0, s>>>(st->plan, from, pass == 0, w, bit, st->counts,
                                                   st->totals, to, pass == kPasses - 1, p);
  }
  Barrier<<<1, 32, 0, s>>>(p, kBarDone, rank, w, e);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

int RunBf16(kf_ctx* ctx, State* st, const Peers& p) {
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  const int w = ctx->world_size, rank = ctx->rank;
  const long long n = x.numel, len = y.numel;
  cudaStream_t s = ctx->stream;
  const size_t hist_off = kOffHist + (st->epoch % 2) * kValues * sizeof(unsigned int);
  unsigned int* hist =
      reinterpret_cast<unsigned int*>(static_cast<char*>(ctx->workspace.data) + hist_off);
  if (cudaMemsetAsync(hist, 0, kValues * sizeof(unsigned int), s) != cudaSuccess) return 1;
  if (n > 0) {
    const long long chunks = (n + kHistChunk - 1) / kHistChunk;
    const int grid = static_cast<int>(chunks < st->sms ? chunks : st->sms);
    HistBf16<<<grid, kHistThreads, kValues / 2 * sizeof(unsigned int), s>>>(
        static_cast<const uint16_t*>(x.data), n, hist);
  }
  Barrier<<<1, 32, 0, s>>>(p, kBarHist, rank, w, st->epoch);
  constexpr int kBlocks = kValues / kPrefixThreads;
  SumBf16<<<kBlocks, kPrefixThreads, 0, s>>>(p, hist_off, w, st->local, st->block_total);
  PrefixBf16<<<kBlocks + 1, kPrefixThreads, 0, s>>>(st->local, st->block_total, st->prefix);
  if (len > 0) {
    const int grid = static_cast<int>((len + kExpandTile - 1) / kExpandTile);
    ExpandBf16<<<grid, kExpandThreads, 0, s>>>(st->prefix, rank, w, len,
                                               static_cast<uint16_t*>(y.data));
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->num_inputs < 1 || ctx->num_outputs < 1) return 1;
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& y = ctx->outputs[0];
  const int w = ctx->world_size;
  if (w < 1 || w > kMaxWorld) return 1;
  if (ctx->signal_pad.nbytes < sizeof(uint32_t) * kMaxWorld * (kBarHist + 1)) return 1;
  if (x.dtype != y.dtype || (x.dtype != KF_F32 && x.dtype != KF_BF16)) return 2;
  State* st = new State;
  ctx->user = st;
  st->sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  if (x.dtype == KF_F32) {
    // len >= floor(total / W) on every rank, so W * (len + 1) > total.
    st->cap = static_cast<long long>(w) * (y.numel + 1);
    if (st->cap >= (1ll << 32)) return 1;  // 32-bit positions in the sort
    if (kOffRecv + (AlignedKeys(st->cap) + st->cap) * sizeof(uint32_t) > ctx->workspace.nbytes)
      return 1;
    const long long tiles = (st->cap + kTile - 1) / kTile;
    st->sort_blocks = static_cast<int>(tiles < 2 * st->sms ? tiles : 2 * st->sms);
    if (cudaMalloc(&st->plan, sizeof(Plan)) != cudaSuccess ||
        cudaMalloc(&st->cursor, sizeof(unsigned long long) * kMaxWorld) != cudaSuccess ||
        cudaMalloc(&st->counts, sizeof(unsigned int) * kRadix * st->sort_blocks) != cudaSuccess ||
        cudaMalloc(&st->totals, sizeof(unsigned int) * kRadix) != cudaSuccess)
      return 1;
  } else {
    if (kOffHist + 2 * kValues * sizeof(unsigned int) > ctx->workspace.nbytes) return 1;
    if (ctx->gpu.smem_per_block_optin < kValues / 2 * sizeof(unsigned int)) return 1;
    if (cudaFuncSetAttribute(HistBf16, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kValues / 2 * sizeof(unsigned int)) != cudaSuccess)
      return 1;
    if (cudaMalloc(&st->local, sizeof(unsigned long long) * kValues) != cudaSuccess ||
        cudaMalloc(&st->block_total, sizeof(unsigned long long) * (kValues / kPrefixThreads)) !=
            cudaSuccess ||
        cudaMalloc(&st->prefix, sizeof(unsigned long long) * (kValues + 1)) != cudaSuccess)
      return 1;
  }
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 1;
  st->epoch += 1;
  const Peers p = MakePeers(ctx);
  return ctx->inputs[0].dtype == KF_F32 ? RunF32(ctx, st, p) : RunBf16(ctx, st, p);
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  for (void* ptr : {static_cast<void*>(st->plan), static_cast<void*>(st->cursor),
                    static_cast<void*>(st->counts), static_cast<void*>(st->totals),
                    static_cast<void*>(st->local), static_cast<void*>(st->block_total),
                    static_cast<void*>(st->prefix)}) {
    if (ptr != nullptr && cudaFree(ptr) != cudaSuccess) rc = 1;
  }
  delete st;
  ctx->user = nullptr;
  return rc;
}
