// 2-hop neighbour sampling by pulling: every rank reads each frontier node's
// CSC entries straight from its owner's csc_colptr and csc_row (peer
// pointers), so nothing is asked or answered: no partition by owner, no count
// exchanges, no host round trips (the baseline stops the stream six times per
// hop to read counts on the host, as PyTorch's .tolist() and unique do) and
// no collectives. The stream never waits for the host: every count lives in
// device memory and every kernel is launched over its buffer's capacity,
// reading the live count.
//
// Per hop (scalars[h] = frontier size, nodes and edges so far, the frontier's
// first label; written by the hop before, read-only during the hop):
//   1. Count: for frontier node i, its owner's colptr entries (a remote read),
//      count[i] = min(k, degree) and where its neighbours start; a block sum;
//   2. a scan of the counts: where frontier node i's edges go;
//   3. Gather: thread (i, t) reads the t-th neighbour from the owner's
//      csc_row, writes the edge id and destination label, and inserts the
//      neighbour in the hash table (node id -> smallest position; atomicMin);
//   4. Flags: an edge whose position is its neighbour's smallest is a first
//      appearance; a scan numbers them (first-seen order);
//   5. Number: the new nodes get their labels, go to the node list and the next
//      frontier; Relabel: every edge's neighbour label; thread 0 of the last
//      block writes scalars[h + 1].
// A start barrier through the signal pad makes sure every peer is in the call
// (its inputs in place). No end barrier: only peers' inputs are read and only
// this rank's outputs and workspace are written.
#include <stdint.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kItems = 8;
constexpr int64_t kTile = kThreads * kItems;
constexpr unsigned long long kEmpty = ~0ull;

struct Peers {
  const int64_t* colptr[KF_MAX_RANKS];
  const int64_t* row[KF_MAX_RANKS];
  uint32_t* pad[KF_MAX_RANKS];
};

// What a hop starts from.
struct Scalars {
  int64_t frontier;    // frontier nodes
  int64_t nodes;       // nodes so far (the frontier is the last `frontier` of them)
  int64_t edges;       // edges so far
  int64_t edge_count;  // scratch: this hop's edges (the scan's total)
  int64_t new_count;   // scratch: this hop's new nodes (the scan's total)
};

struct Table {
  unsigned long long* keys;  // node id or kEmpty
  int* first;                // the smallest position at which the id appeared
  int* label;                // its place in the node list
  uint64_t mask;
};

__device__ __forceinline__ uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ uint64_t Insert(Table t, int64_t key) {
  uint64_t s = Mix(static_cast<uint64_t>(key)) & t.mask;
  for (;;) {
    const unsigned long long prev =
        atomicCAS(t.keys + s, kEmpty, static_cast<unsigned long long>(key));
    if (prev == kEmpty || prev == static_cast<unsigned long long>(key)) return s;
    s = (s + 1) & t.mask;
  }
}

__global__ void StartBarrier(Peers p, uint32_t* epoch, int rank, int world) {
  const uint32_t e = *epoch + 1;
  const int peer = threadIdx.x;
  if (peer < world && peer != rank) {
    kf_signal(p.pad[peer] + rank, e);
    kf_wait(p.pad[rank] + peer, e);
  }
  __syncthreads();
  if (threadIdx.x == 0) *epoch = e;
}

// The seeds are the first nodes and the first frontier.
__global__ void Seed(const int64_t* __restrict__ seeds, int64_t s, Table t, int64_t* node,
                     int64_t* front, Scalars* sc) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i == 0) *sc = {s, s, 0, 0, 0};
  if (i >= s) return;
  const uint64_t slot = Insert(t, seeds[i]);
  t.first[slot] = static_cast<int>(i);
  t.label[slot] = static_cast<int>(i);
  node[i] = seeds[i];
  front[i] = seeds[i];
}

__device__ long long TileTotal(long long v) {
  using Reduce = cub::BlockReduce<long long, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  return Reduce(tmp).Sum(v);
}

// 1. count[i] = min(k, deg(front[i])), start[i] = its first edge id, owner[i];
// sums[tile] = the tile's total.
__global__ void __launch_bounds__(kThreads)
    Count(Peers p, const int64_t* __restrict__ front, const int64_t* __restrict__ node_to_rank,
          const Scalars* __restrict__ sc, int64_t k, int64_t* count, int64_t* start, int* owner,
          long long* sums) {
  const int64_t n = sc->frontier;
  const int64_t base = blockIdx.x * kTile;
  long long v = 0;
  for (int j = 0; j < kItems; ++j) {
    const int64_t i = base + j * kThreads + threadIdx.x;
    if (i < n) {
      const int64_t u = front[i];
      const int o = static_cast<int>(node_to_rank[u]);
      const int64_t lo = p.colptr[o][u], hi = p.colptr[o][u + 1];
      const int64_t c = hi - lo < k ? hi - lo : k;
      count[i] = c;
      start[i] = lo;
      owner[i] = o;
      v += c;
    }
  }
  v = TileTotal(v);
  if (threadIdx.x == 0) sums[blockIdx.x] = v;
}

// Flags: flag[x] = 1 where edge x of this hop is its neighbour's first appearance.
__global__ void __launch_bounds__(kThreads)
    Flags(const int64_t* __restrict__ slot, Table t, const Scalars* __restrict__ sc, int64_t* flag,
          long long* sums) {
  const int64_t n = sc->edge_count, nodes = sc->nodes;
  const int64_t base = blockIdx.x * kTile;
  long long v = 0;
  for (int j = 0; j < kItems; ++j) {
    const int64_t x = base + j * kThreads + threadIdx.x;
    if (x < n) {
      const int64_t f = t.first[slot[x]] == nodes + x ? 1 : 0;
      flag[x] = f;
      v += f;
    }
  }
  v = TileTotal(v);
  if (threadIdx.x == 0) sums[blockIdx.x] = v;
}

// sums[0..tiles) := their exclusive prefix; *total := the sum.
__global__ void __launch_bounds__(kThreads) ScanSums(long long* sums, int tiles, int64_t* total) {
  using Scan = cub::BlockScan<long long, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ long long carry;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int b = 0; b < tiles; b += kThreads) {
    const int i = b + threadIdx.x;
    long long v = i < tiles ? sums[i] : 0, agg;
    Scan(tmp).ExclusiveSum(v, v, agg);
    if (i < tiles) sums[i] = v + carry;
    __syncthreads();
    if (threadIdx.x == 0) carry += agg;
    __syncthreads();
  }
  if (threadIdx.x == 0) *total = carry;
}

// out[i] = exclusive prefix of in[i] for i < *n (tile prefixes from ScanSums).
__global__ void __launch_bounds__(kThreads)
    TileScan(const int64_t* __restrict__ in, const int64_t* __restrict__ n_ptr,
             const long long* __restrict__ sums, int64_t* out) {
  using Scan = cub::BlockScan<long long, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const int64_t n = *n_ptr;
  const int64_t base = blockIdx.x * kTile + threadIdx.x * kItems;  // blocked arrangement
  if (blockIdx.x * kTile >= n) return;  // the whole block: no thread takes part in the scan
  long long v[kItems];
  for (int j = 0; j < kItems; ++j) v[j] = base + j < n ? in[base + j] : 0;
  Scan(tmp).ExclusiveSum(v, v);
  for (int j = 0; j < kItems; ++j)
    if (base + j < n) out[base + j] = v[j] + sums[blockIdx.x];
}

// 3. Thread (i, t): the t-th neighbour of frontier node i.
__global__ void Gather(Peers p, const int64_t* __restrict__ count,
                       const int64_t* __restrict__ start, const int* __restrict__ owner,
                       const int64_t* __restrict__ at, const int64_t* __restrict__ first_edge,
                       const Scalars* __restrict__ sc, int64_t k, Table t, int64_t* nbr,
                       int64_t* slot, int64_t* col, int64_t* edge) {
  const int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t i = x / k, j = x % k;
  if (i >= sc->frontier || j >= count[i]) return;
  const int o = owner[i];
  const int64_t e = start[i] + j, pos = at[i] + j;
  const int64_t n = p.row[o][e - first_edge[o]];
  nbr[pos] = n;
  const uint64_t s = Insert(t, n);
  atomicMin(t.first + s, static_cast<int>(sc->nodes + pos));
  slot[pos] = static_cast<int64_t>(s);
  const int64_t out = sc->edges + pos;
  edge[out] = e;
  col[out] = sc->nodes - sc->frontier + i;
}

// Where every owner's csc_row starts in global edge ids (its colptr[0]).
__global__ void FirstEdges(Peers p, int world, int64_t* first_edge) {
  if (threadIdx.x < world) first_edge[threadIdx.x] = p.colptr[threadIdx.x][0];
}

// 5. The new nodes: labels, node list, next frontier.
__global__ void Number(const int64_t* __restrict__ nbr, const int64_t* __restrict__ slot,
                       const int64_t* __restrict__ flag, const int64_t* __restrict__ rank_of,
                       const Scalars* __restrict__ sc, Table t, int64_t* node, int64_t* next) {
  const int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (x >= sc->edge_count || flag[x] == 0) return;
  const int64_t label = sc->nodes + rank_of[x];
  // Its label is also its smallest position from now on, below every later hop's positions.
  t.label[slot[x]] = static_cast<int>(label);
  t.first[slot[x]] = static_cast<int>(label);
  node[label] = nbr[x];
  if (next != nullptr) next[rank_of[x]] = nbr[x];  // null after the last hop
}

// Every edge's neighbour label; the last block's thread 0 writes the next hop's scalars
// (and the counts, in case this is the last hop).
__global__ void Relabel(const int64_t* __restrict__ slot, const Scalars* __restrict__ sc, Table t,
                        int64_t* row, Scalars* next_sc, int64_t* num_nodes, int64_t* num_edges) {
  const int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const Scalars s = *sc;
  if (x < s.edge_count) row[s.edges + x] = t.label[slot[x]];
  if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) {
    *next_sc = {s.new_count, s.nodes + s.new_count, s.edges + s.edge_count, 0, 0};
    *num_nodes = s.nodes + s.new_count;
    *num_edges = s.edges + s.edge_count;
  }
}

size_t Align(size_t bytes) { return (bytes + 255) / 256 * 256; }

struct Carver {
  char* at;
  char* end;
  template <typename T>
  T* Take(int64_t n) {
    T* p = reinterpret_cast<T*>(at);
    at += Align(static_cast<size_t>(n) * sizeof(T));
    return p;
  }
  bool ok() const { return at <= end; }
};

int Blocks(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b > 0 ? b : 1);
}

struct State {
  uint32_t* epoch;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size < 1 || ctx->world_size > KF_MAX_RANKS) return 1;
  State* st = new State;
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
  const kf_tensor* seeds_t = kf_input(ctx, "seeds");
  const kf_tensor* owner_t = kf_input(ctx, "node_to_rank");
  const kf_tensor* colptr_t = kf_input(ctx, "csc_colptr");
  const kf_tensor* row_t = kf_input(ctx, "csc_row");
  kf_tensor* node_t = kf_output(ctx, "node");
  kf_tensor* row_out = kf_output(ctx, "row");
  kf_tensor* col_out = kf_output(ctx, "col");
  kf_tensor* edge_out = kf_output(ctx, "edge");
  kf_tensor* num_nodes = kf_output(ctx, "num_nodes");
  kf_tensor* num_edges = kf_output(ctx, "num_edges");
  if (st == nullptr || !seeds_t || !owner_t || !colptr_t || !row_t || !node_t || !row_out ||
      !col_out || !edge_out || !num_nodes || !num_edges)
    return 1;
  const int w = ctx->world_size, rank = ctx->rank;
  const int64_t s = seeds_t->numel;
  const int64_t fanout[2] = {static_cast<int64_t>(kf_param(ctx, "k1", 0)),
                             static_cast<int64_t>(kf_param(ctx, "k2", 0))};
  if (fanout[0] < 1 || fanout[1] < 1) return 1;
  // Capacities: a hop's frontier (hop 1: the seeds; hop 2: at most S * k1 new nodes) and edges.
  const int64_t front_cap[2] = {s, s * fanout[0]};
  const int64_t hop_cap[2] = {s * fanout[0], s * fanout[0] * fanout[1]};
  uint64_t slots = 1;
  while (slots < 2 * static_cast<uint64_t>(node_t->numel)) slots *= 2;

  Carver c{static_cast<char*>(ctx->workspace.data),
           static_cast<char*>(ctx->workspace.data) + ctx->workspace.nbytes};
  int64_t* front = c.Take<int64_t>(front_cap[1]);
  int64_t* next = c.Take<int64_t>(front_cap[1]);
  int64_t* count = c.Take<int64_t>(front_cap[1]);
  int64_t* start = c.Take<int64_t>(front_cap[1]);
  int* owner = c.Take<int>(front_cap[1]);
  int64_t* at = c.Take<int64_t>(front_cap[1]);
  int64_t* nbr = c.Take<int64_t>(hop_cap[1]);
  int64_t* slot = c.Take<int64_t>(hop_cap[1]);
  int64_t* flag = c.Take<int64_t>(hop_cap[1]);
  int64_t* rank_of = c.Take<int64_t>(hop_cap[1]);
  long long* sums = c.Take<long long>(hop_cap[1] / kTile + 1);
  int64_t* first_edge = c.Take<int64_t>(KF_MAX_RANKS);
  Scalars* sc = c.Take<Scalars>(3);
  Table t;
  t.keys = c.Take<unsigned long long>(static_cast<int64_t>(slots));
  t.first = c.Take<int>(static_cast<int64_t>(slots));
  t.label = c.Take<int>(static_cast<int64_t>(slots));
  t.mask = slots - 1;
  if (!c.ok()) return 1;

  Peers p = {};
  for (int o = 0; o < w; ++o) {
    p.colptr[o] = static_cast<const int64_t*>(colptr_t->peers[o]);
    p.row[o] = static_cast<const int64_t*>(row_t->peers[o]);
    p.pad[o] = static_cast<uint32_t*>(ctx->signal_pad.peers[o]);
  }
  cudaStream_t stream = ctx->stream;
  const int64_t* node_to_rank = static_cast<const int64_t*>(owner_t->data);
  int64_t* node = static_cast<int64_t*>(node_t->data);
  int64_t* rows = static_cast<int64_t*>(row_out->data);
  int64_t* cols = static_cast<int64_t*>(col_out->data);
  int64_t* edges = static_cast<int64_t*>(edge_out->data);
  int64_t* nn = static_cast<int64_t*>(num_nodes->data);
  int64_t* ne = static_cast<int64_t*>(num_edges->data);

  if (cudaMemsetAsync(t.keys, 0xff, slots * sizeof(unsigned long long), stream) != cudaSuccess ||
      cudaMemsetAsync(t.first, 0x7f, slots * sizeof(int), stream) != cudaSuccess)
    return 1;
  StartBarrier<<<1, 32, 0, stream>>>(p, st->epoch, rank, w);
  FirstEdges<<<1, 32, 0, stream>>>(p, w, first_edge);
  const int seed_blocks = Blocks(s, kThreads);
  Seed<<<seed_blocks, kThreads, 0, stream>>>(static_cast<const int64_t*>(seeds_t->data), s, t, node,
                                             front, sc);
  for (int hop = 0; hop < 2; ++hop) {
    const int64_t k = fanout[hop];
    Scalars* now = sc + hop;
    const int front_tiles = static_cast<int>((front_cap[hop] + kTile - 1) / kTile);
    const int hop_tiles = static_cast<int>((hop_cap[hop] + kTile - 1) / kTile);
    Count<<<front_tiles, kThreads, 0, stream>>>(p, front, node_to_rank, now, k, count, start, owner,
                                                sums);
    ScanSums<<<1, kThreads, 0, stream>>>(sums, front_tiles, &now->edge_count);
    TileScan<<<front_tiles, kThreads, 0, stream>>>(count, &now->frontier, sums, at);
    const int gather_blocks = Blocks(front_cap[hop] * k, kThreads);
    Gather<<<gather_blocks, kThreads, 0, stream>>>(p, count, start, owner, at, first_edge, now, k,
                                                   t, nbr, slot, cols, edges);
    Flags<<<hop_tiles, kThreads, 0, stream>>>(slot, t, now, flag, sums);
    ScanSums<<<1, kThreads, 0, stream>>>(sums, hop_tiles, &now->new_count);
    TileScan<<<hop_tiles, kThreads, 0, stream>>>(flag, &now->edge_count, sums, rank_of);
    const int hop_blocks = Blocks(hop_cap[hop], kThreads);
    Number<<<hop_blocks, kThreads, 0, stream>>>(nbr, slot, flag, rank_of, now, t, node,
                                                hop == 0 ? next : nullptr);
    Relabel<<<hop_blocks, kThreads, 0, stream>>>(slot, now, t, rows, sc + hop + 1, nn, ne);
    int64_t* tmp = front;
    front = next;
    next = tmp;
  }
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st != nullptr) {
    cudaFree(st->epoch);
    delete st;
  }
  ctx->user = nullptr;
  return 0;
}
