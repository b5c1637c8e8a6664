// 2-hop neighbour sampling baseline, as PyG's distributed sampler (and PKB's
// reference) does it, on the GPU with the harness collectives. Per hop:
//   1. partition the frontier by owner (node_to_rank), stably: the send buffer
//      holds every owner's nodes in frontier order, and each frontier node
//      remembers its place there;
//   2. an all-to-all of the counts, the counts to the host (.tolist()), a
//      variable-count all-to-all of the node ids (kf_all_to_allv: NCCL's
//      grouped send/recv on real GPUs);
//   3. the owner takes each asked node's first min(k, degree) neighbours from
//      its CSC slice (a count per node, a scan, a gather), sums the answers per
//      asking rank, an all-to-all of those sums, the sums to the host, and three
//      variable-count all-to-alls back: neighbour ids, edge ids, counts per node;
//   4. the asking rank finds each frontier node's answer (the answers arrive in
//      its send order), lays them out in frontier order (a scan) and writes the
//      edge ids and destination labels;
//   5. first-seen dedup against every node so far: a hash table keyed by node
//      id keeps the smallest position at which each id appears (atomicMin),
//      the first appearances are numbered by a scan (one more host copy for
//      the next frontier's size), and every edge's neighbour gets its label.
// The hash table (node id -> position, label) lives across both hops, so the
// relabelling PyG does at the end happens as the nodes are found.
#include <stdint.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <vector>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kItems = 8;
constexpr int64_t kTile = kThreads * kItems;
constexpr int kPartitionThreads = 1024;
constexpr unsigned long long kEmpty = ~0ull;

__device__ __forceinline__ uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The hash table: keys[slot] (node id or kEmpty), first[slot] (the smallest
// position at which the id appeared), label[slot] (its place in the node list).
struct Table {
  unsigned long long* keys;
  int* first;
  int* label;
  uint64_t mask;
};

__device__ __forceinline__ uint64_t Insert(Table t, int64_t key) {
  uint64_t s = Mix(static_cast<uint64_t>(key)) & t.mask;
  for (;;) {
    const unsigned long long prev =
        atomicCAS(t.keys + s, kEmpty, static_cast<unsigned long long>(key));
    if (prev == kEmpty || prev == static_cast<unsigned long long>(key)) return s;
    s = (s + 1) & t.mask;
  }
}

// --- Exclusive scan of n int64 values: out[0..n] (out[n] = total), three kernels.
__global__ void __launch_bounds__(kThreads)
    TileSums(const int64_t* __restrict__ in, int64_t n, long long* sums) {
  using Reduce = cub::BlockReduce<long long, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int64_t base = blockIdx.x * kTile;
  long long v = 0;
  for (int i = 0; i < kItems; ++i) {
    const int64_t at = base + i * kThreads + threadIdx.x;
    if (at < n) v += in[at];
  }
  v = Reduce(tmp).Sum(v);
  if (threadIdx.x == 0) sums[blockIdx.x] = v;
}

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

__global__ void __launch_bounds__(kThreads)
    TileScan(const int64_t* __restrict__ in, int64_t n, const long long* __restrict__ sums,
             int64_t* out) {
  using Scan = cub::BlockScan<long long, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const int64_t base = blockIdx.x * kTile + threadIdx.x * kItems;  // blocked arrangement
  long long v[kItems];
  for (int i = 0; i < kItems; ++i) v[i] = base + i < n ? in[base + i] : 0;
  Scan(tmp).ExclusiveSum(v, v);
  for (int i = 0; i < kItems; ++i)
    if (base + i < n) out[base + i] = v[i] + sums[blockIdx.x];
}

// out[0..n] = exclusive prefix sums of in[0..n-1]; out[n] = the total.
void ExclusiveScan(const int64_t* in, int64_t n, int64_t* out, long long* sums, cudaStream_t s) {
  const int tiles = static_cast<int>((n + kTile - 1) / kTile);
  if (tiles > 0) TileSums<<<tiles, kThreads, 0, s>>>(in, n, sums);
  ScanSums<<<1, kThreads, 0, s>>>(sums, tiles, out + n);
  if (tiles > 0) TileScan<<<tiles, kThreads, 0, s>>>(in, n, sums, out);
}

int Blocks(int64_t n, int threads) { return static_cast<int>((n + threads - 1) / threads); }

// --- Step 0: the seeds are the first nodes and the first frontier.
__global__ void Seed(const int64_t* __restrict__ seeds, int64_t s, Table t, int64_t* node,
                     int64_t* front) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= s) return;
  const uint64_t slot = Insert(t, seeds[i]);
  t.first[slot] = static_cast<int>(i);
  t.label[slot] = static_cast<int>(i);
  node[i] = seeds[i];
  front[i] = seeds[i];
}

// --- Step 1: stable partition of the frontier by owner (one block).
// send[place[i]] = front[i]; counts[d] = frontier nodes owned by d.
__global__ void __launch_bounds__(kPartitionThreads)
    PartitionByOwner(const int64_t* __restrict__ front, int64_t nf,
                     const int64_t* __restrict__ owner, int world, int64_t* send, int64_t* place,
                     int64_t* counts) {
  constexpr int kWarps = kPartitionThreads / 32;
  __shared__ int64_t start[KF_MAX_RANKS];
  __shared__ int warp_count[kWarps][KF_MAX_RANKS];
  __shared__ int warp_base[kWarps][KF_MAX_RANKS];
  __shared__ int total[KF_MAX_RANKS];
  if (threadIdx.x < KF_MAX_RANKS) total[threadIdx.x] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < nf; i += kPartitionThreads)
    atomicAdd(&total[owner[front[i]]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t at = 0;
    for (int d = 0; d < world; ++d) {
      start[d] = at;
      counts[d] = total[d];
      at += total[d];
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t b = 0; b < nf; b += kPartitionThreads) {
    const int64_t i = b + threadIdx.x;
    const int o = i < nf ? static_cast<int>(owner[front[i]]) : world;
    for (int k = threadIdx.x; k < kWarps * KF_MAX_RANKS; k += kPartitionThreads)
      (&warp_count[0][0])[k] = 0;
    __syncthreads();
    const unsigned same = __match_any_sync(0xffffffffu, o);
    const int before = __popc(same & ((1u << lane) - 1));
    if (o < world && before == 0) warp_count[warp][o] = __popc(same);
    __syncthreads();
    if (threadIdx.x < world) {
      const int d = threadIdx.x;
      int at = 0;
      for (int w = 0; w < kWarps; ++w) {
        warp_base[w][d] = at;
        at += warp_count[w][d];
      }
    }
    __syncthreads();
    if (o < world) {
      const int64_t p = start[o] + warp_base[warp][o] + before;
      send[p] = front[i];
      place[i] = p;
    }
    __syncthreads();
    if (threadIdx.x < world)
      start[threadIdx.x] +=
          warp_base[kWarps - 1][threadIdx.x] + warp_count[kWarps - 1][threadIdx.x];
    __syncthreads();
  }
}

// --- Step 3 (owner side): answers for the asked nodes.
__global__ void AnswerCounts(const int64_t* __restrict__ asked, int64_t n,
                             const int64_t* __restrict__ colptr, int64_t k, int64_t* count) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= n) return;
  const int64_t v = asked[j];
  const int64_t d = colptr[v + 1] - colptr[v];
  count[j] = d < k ? d : k;
}

// Thread (j, t): the t-th neighbour of asked node j.
__global__ void Answer(const int64_t* __restrict__ asked, int64_t n,
                       const int64_t* __restrict__ colptr, const int64_t* __restrict__ row,
                       int64_t k, const int64_t* __restrict__ count,
                       const int64_t* __restrict__ offset, int64_t* nbr, int64_t* eid) {
  const int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t j = x / k, t = x % k;
  if (j >= n || t >= count[j]) return;
  const int64_t e = colptr[asked[j]] + t;
  nbr[offset[j] + t] = row[e - colptr[0]];
  eid[offset[j] + t] = e;
}

struct Displ {
  int64_t at[KF_MAX_RANKS + 1];
};

// The answers per asking rank: the asked nodes from rank p are [at[p], at[p+1]).
__global__ void AnswersPerRank(const int64_t* __restrict__ offset, Displ displ, int world,
                               int64_t* per_rank) {
  const int p = threadIdx.x;
  if (p < world) per_rank[p] = offset[displ.at[p + 1]] - offset[displ.at[p]];
}

// --- Step 4 (asking side): frontier node i's answer is at place[i] in send order.
__global__ void FrontierCounts(const int64_t* __restrict__ place, int64_t nf,
                               const int64_t* __restrict__ got, int64_t* count) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < nf) count[i] = got[place[i]];
}

// Thread (i, t): the t-th answer of frontier node i (label base + i).
__global__ void Place(const int64_t* __restrict__ place, int64_t nf, int64_t k,
                      const int64_t* __restrict__ got, const int64_t* __restrict__ got_at,
                      const int64_t* __restrict__ at, const int64_t* __restrict__ nbr_in,
                      const int64_t* __restrict__ eid_in, int64_t base, int64_t* hop_nbr,
                      int64_t* col, int64_t* edge) {
  const int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t i = x / k, t = x % k;
  if (i >= nf) return;
  const int64_t g = place[i];
  if (t >= got[g]) return;
  const int64_t to = at[i] + t, from = got_at[g] + t;
  hop_nbr[to] = nbr_in[from];
  edge[to] = eid_in[from];
  col[to] = base + i;
}

// --- Step 5: first-seen dedup. Position of hop edge x in the combined list: nodes + x.
__global__ void InsertHop(const int64_t* __restrict__ nbr, int64_t n, int64_t nodes, Table t,
                          int64_t* slot) {
  const int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (x >= n) return;
  const uint64_t s = Insert(t, nbr[x]);
  atomicMin(t.first + s, static_cast<int>(nodes + x));
  slot[x] = static_cast<int64_t>(s);
}

__global__ void FirstFlags(const int64_t* __restrict__ slot, int64_t n, int64_t nodes, Table t,
                           int64_t* flag) {
  const int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (x < n) flag[x] = t.first[slot[x]] == nodes + x ? 1 : 0;
}

__global__ void Number(const int64_t* __restrict__ nbr, const int64_t* __restrict__ slot,
                       const int64_t* __restrict__ flag, const int64_t* __restrict__ rank_of,
                       int64_t n, int64_t nodes, Table t, int64_t* node, int64_t* next) {
  const int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (x >= n || flag[x] == 0) return;
  const int64_t r = rank_of[x];
  // Its label; also its first position from now on, below every later hop's positions.
  t.label[slot[x]] = static_cast<int>(nodes + r);
  t.first[slot[x]] = static_cast<int>(nodes + r);
  node[nodes + r] = nbr[x];
  if (next != nullptr) next[r] = nbr[x];  // null after the last hop
}

__global__ void Relabel(const int64_t* __restrict__ slot, int64_t n, Table t, int64_t* row) {
  const int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (x < n) row[x] = t.label[slot[x]];
}

__global__ void WriteCounts(int64_t nodes, int64_t edges, int64_t* num_nodes, int64_t* num_edges) {
  *num_nodes = nodes;
  *num_edges = edges;
}

size_t Align(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Carves the workspace into buffers.
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

struct State {
  std::vector<int64_t> h_send, h_recv, h_ans_send, h_ans_recv, h_scalar;
  std::vector<size_t> sc, sd, rc, rd, ac, ad, bc, bd;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int w = ctx->world_size;
  if (w < 1 || w > KF_MAX_RANKS) return 1;
  State* st = new State;
  for (auto* v : {&st->h_send, &st->h_recv, &st->h_ans_send, &st->h_ans_recv}) v->resize(w);
  st->h_scalar.resize(2);
  for (auto* v : {&st->sc, &st->sd, &st->rc, &st->rd, &st->ac, &st->ad, &st->bc, &st->bd})
    v->resize(w);
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
  const int w = ctx->world_size;
  const int64_t s = seeds_t->numel;
  const int64_t fanout[2] = {static_cast<int64_t>(kf_param(ctx, "k1", 0)),
                             static_cast<int64_t>(kf_param(ctx, "k2", 0))};
  if (fanout[0] < 1 || fanout[1] < 1) return 1;
  const int64_t front_cap = s * fanout[0];               // the largest frontier
  const int64_t hop_cap = front_cap * fanout[1];         // the most answers one hop gets
  const int64_t asked_cap = w * front_cap;               // the most nodes an owner is asked
  const int64_t answer_cap = w * front_cap * fanout[1];  // the most answers an owner gives
  const int64_t node_cap = node_t->numel;
  uint64_t slots = 1;
  while (slots < 2 * static_cast<uint64_t>(node_cap)) slots *= 2;
  const int64_t scan_cap = asked_cap > hop_cap ? asked_cap : hop_cap;

  Carver c{static_cast<char*>(ctx->workspace.data),
           static_cast<char*>(ctx->workspace.data) + ctx->workspace.nbytes};
  int64_t* front = c.Take<int64_t>(front_cap);
  int64_t* next = c.Take<int64_t>(front_cap);
  int64_t* send = c.Take<int64_t>(front_cap);
  int64_t* place = c.Take<int64_t>(front_cap);
  int64_t* fcount = c.Take<int64_t>(front_cap);
  int64_t* fat = c.Take<int64_t>(front_cap + 1);
  int64_t* got = c.Take<int64_t>(front_cap);
  int64_t* got_at = c.Take<int64_t>(front_cap + 1);
  int64_t* dcount = c.Take<int64_t>(2 * w);  // send counts | receive counts
  int64_t* dans = c.Take<int64_t>(2 * w);    // answers per rank: sent | received
  int64_t* asked = c.Take<int64_t>(asked_cap);
  int64_t* acount = c.Take<int64_t>(asked_cap);
  int64_t* aoff = c.Take<int64_t>(asked_cap + 1);
  int64_t* anbr = c.Take<int64_t>(answer_cap);
  int64_t* aeid = c.Take<int64_t>(answer_cap);
  int64_t* nbr_in = c.Take<int64_t>(hop_cap);
  int64_t* eid_in = c.Take<int64_t>(hop_cap);
  int64_t* hop_nbr = c.Take<int64_t>(hop_cap);
  int64_t* slot = c.Take<int64_t>(hop_cap);
  int64_t* flag = c.Take<int64_t>(hop_cap);
  int64_t* rank_of = c.Take<int64_t>(hop_cap + 1);
  long long* sums = c.Take<long long>(scan_cap / kTile + 1);
  Table t;
  t.keys = c.Take<unsigned long long>(static_cast<int64_t>(slots));
  t.first = c.Take<int>(static_cast<int64_t>(slots));
  t.label = c.Take<int>(static_cast<int64_t>(slots));
  t.mask = slots - 1;
  if (!c.ok()) return 1;

  cudaStream_t stream = ctx->stream;
  const int64_t* owner = static_cast<const int64_t*>(owner_t->data);
  const int64_t* colptr = static_cast<const int64_t*>(colptr_t->data);
  const int64_t* row = static_cast<const int64_t*>(row_t->data);
  int64_t* node = static_cast<int64_t*>(node_t->data);
  int64_t* rows = static_cast<int64_t*>(row_out->data);
  int64_t* cols = static_cast<int64_t*>(col_out->data);
  int64_t* edges = static_cast<int64_t*>(edge_out->data);

  if (cudaMemsetAsync(t.keys, 0xff, slots * sizeof(unsigned long long), stream) != cudaSuccess ||
      cudaMemsetAsync(t.first, 0x7f, slots * sizeof(int), stream) != cudaSuccess)
    return 1;
  if (s > 0)
    Seed<<<Blocks(s, kThreads), kThreads, 0, stream>>>(static_cast<const int64_t*>(seeds_t->data),
                                                       s, t, node, front);
  int64_t nodes = s, nedges = 0, nf = s, base = 0;
  // Every rank takes part in both hops' collectives, even with an empty frontier: its peers
  // may still ask it for neighbours (PKB's reference leaves the loop on an empty frontier,
  // which would leave its peers waiting in the next all-to-all).
  for (int hop = 0; hop < 2; ++hop) {
    const int64_t k = fanout[hop];
    // 1-2. Partition by owner, exchange the counts, then the node ids.
    PartitionByOwner<<<1, kPartitionThreads, 0, stream>>>(front, nf, owner, w, send, place, dcount);
    if (kf_all_to_all(ctx, dcount, dcount + w, 1, KF_I64) != 0) return 1;
    if (cudaMemcpyAsync(st->h_send.data(), dcount, 8 * w, cudaMemcpyDeviceToHost, stream) !=
            cudaSuccess ||
        cudaMemcpyAsync(st->h_recv.data(), dcount + w, 8 * w, cudaMemcpyDeviceToHost, stream) !=
            cudaSuccess ||
        cudaStreamSynchronize(stream) != cudaSuccess)
      return 1;
    size_t so = 0, ro = 0;
    for (int p = 0; p < w; ++p) {
      st->sc[p] = static_cast<size_t>(st->h_send[p]);
      st->rc[p] = static_cast<size_t>(st->h_recv[p]);
      st->sd[p] = so;
      st->rd[p] = ro;
      so += st->sc[p];
      ro += st->rc[p];
    }
    const int64_t nasked = static_cast<int64_t>(ro);
    if (nasked > asked_cap) return 1;
    if (kf_all_to_allv(ctx, send, st->sc.data(), st->sd.data(), asked, st->rc.data(), st->rd.data(),
                       KF_I64) != 0)
      return 1;

    // 3. Owner: first-k answers, their sums per asking rank, and the exchange back.
    if (nasked > 0)
      AnswerCounts<<<Blocks(nasked, kThreads), kThreads, 0, stream>>>(asked, nasked, colptr, k,
                                                                      acount);
    ExclusiveScan(acount, nasked, aoff, sums, stream);
    if (nasked > 0)
      Answer<<<Blocks(nasked * k, kThreads), kThreads, 0, stream>>>(asked, nasked, colptr, row, k,
                                                                    acount, aoff, anbr, aeid);
    Displ displ = {};
    for (int p = 0; p <= w; ++p) displ.at[p] = p < w ? static_cast<int64_t>(st->rd[p]) : nasked;
    AnswersPerRank<<<1, 32, 0, stream>>>(aoff, displ, w, dans);
    if (kf_all_to_all(ctx, dans, dans + w, 1, KF_I64) != 0) return 1;
    if (cudaMemcpyAsync(st->h_ans_send.data(), dans, 8 * w, cudaMemcpyDeviceToHost, stream) !=
            cudaSuccess ||
        cudaMemcpyAsync(st->h_ans_recv.data(), dans + w, 8 * w, cudaMemcpyDeviceToHost, stream) !=
            cudaSuccess ||
        cudaStreamSynchronize(stream) != cudaSuccess)
      return 1;
    size_t ao = 0, bo = 0;
    for (int p = 0; p < w; ++p) {
      st->ac[p] = static_cast<size_t>(st->h_ans_send[p]);
      st->bc[p] = static_cast<size_t>(st->h_ans_recv[p]);
      st->ad[p] = ao;
      st->bd[p] = bo;
      ao += st->ac[p];
      bo += st->bc[p];
    }
    const int64_t nhop = static_cast<int64_t>(bo);
    if (nhop > hop_cap || nedges + nhop > row_out->numel) return 1;
    if (kf_all_to_allv(ctx, anbr, st->ac.data(), st->ad.data(), nbr_in, st->bc.data(),
                       st->bd.data(), KF_I64) != 0 ||
        kf_all_to_allv(ctx, aeid, st->ac.data(), st->ad.data(), eid_in, st->bc.data(),
                       st->bd.data(), KF_I64) != 0 ||
        kf_all_to_allv(ctx, acount, st->rc.data(), st->rd.data(), got, st->sc.data(), st->sd.data(),
                       KF_I64) != 0)
      return 1;

    // 4. Asking side: the answers in frontier order.
    if (nhop == 0) {  // nothing found (or nothing asked): no new nodes, an empty next frontier
      nf = 0;
      continue;
    }
    ExclusiveScan(got, nf, got_at, sums, stream);
    FrontierCounts<<<Blocks(nf, kThreads), kThreads, 0, stream>>>(place, nf, got, fcount);
    ExclusiveScan(fcount, nf, fat, sums, stream);
    Place<<<Blocks(nf * k, kThreads), kThreads, 0, stream>>>(place, nf, k, got, got_at, fat, nbr_in,
                                                             eid_in, base, hop_nbr, cols + nedges,
                                                             edges + nedges);

    // 5. First-seen dedup and labels.
    const int gb = Blocks(nhop, kThreads);
    InsertHop<<<gb, kThreads, 0, stream>>>(hop_nbr, nhop, nodes, t, slot);
    FirstFlags<<<gb, kThreads, 0, stream>>>(slot, nhop, nodes, t, flag);
    ExclusiveScan(flag, nhop, rank_of, sums, stream);
    Number<<<gb, kThreads, 0, stream>>>(hop_nbr, slot, flag, rank_of, nhop, nodes, t, node,
                                        hop == 0 ? next : nullptr);
    Relabel<<<gb, kThreads, 0, stream>>>(slot, nhop, t, rows + nedges);
    if (cudaMemcpyAsync(st->h_scalar.data(), rank_of + nhop, 8, cudaMemcpyDeviceToHost, stream) !=
            cudaSuccess ||
        cudaStreamSynchronize(stream) != cudaSuccess)
      return 1;
    base = nodes;
    nf = st->h_scalar[0];
    nodes += nf;
    nedges += nhop;
    int64_t* tmp = front;
    front = next;
    next = tmp;
  }
  WriteCounts<<<1, 1, 0, stream>>>(nodes, nedges, static_cast<int64_t*>(num_nodes->data),
                                   static_cast<int64_t*>(num_edges->data));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  delete static_cast<State*>(ctx->user);
  ctx->user = nullptr;
  return 0;
}
