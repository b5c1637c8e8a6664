// Expert broadcast, choosing its algorithm by size as a tuned library does:
//   - small messages: one-shot. After a start barrier every rank copies the root's x
//     into its own y (the root locally). One synchronisation round, but the root's x
//     leaves it W-1 times; MSCCL++'s broadcast (apps/nccl/src/broadcast.hpp,
//     broadcast6: the root writes its buffer to every peer) moves the same bytes.
//   - large messages: scatter + all-gather (van de Geijn; MPICH's
//     MPIR_Bcast_intra_scatter_ring_allgather), on symmetric memory. The W-1 non-root
//     ranks each own one part of the vector: owner j reads part j from the root once
//     and writes it into its own y and into the y of every other non-root rank, then
//     tells them it is done. The root's x leaves it once (N bytes, what any algorithm
//     must send from it), every other rank takes in N and sends (W-2)/(W-1) N, so the
//     busiest link carries about N, as in NCCL's pipelined ring, with two rounds of
//     synchronisation (start barrier, done flags) instead of a ring's W-1 hops.
// The switch: one-shot costs (W-2) N more bytes on the root's link than scatter +
// all-gather, which costs one more round (a few microseconds on NVLink); at ~370 GB/s
// that is (W-2) N < 1 MiB: always at W = 2, below 512 KiB at W = 4, 170 KiB at W = 8.
//
// Barriers: block b of every rank handshakes with block b of every peer through slot
// [b * W + src] of the receiver's signal pad (start barrier: slots from 0, done flags:
// slots from max_blocks * W), with a per-block epoch kept in device memory, so
// back-to-back calls never see a stale flag. Pushes into a peer's y come after the
// start barrier (the peer is in this call, its y no longer the harness's), and a rank
// returns only after every owner's block b has said its pushes are done, so no write
// lands in a y whose rank has returned. Only the root's input is read; the harness
// leaves it alone until every rank has returned. The root comes from the task's param.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;  // 16-byte loads in flight per thread, to cover remote latency

struct PeerPads {
  uint32_t* p[KF_MAX_RANKS];
};

// What this rank copies in one call: src[0, bytes) into every dst[d].
struct Plan {
  const char* src;
  char* dst[KF_MAX_RANKS];
  int ndst;
  int64_t bytes;
  uint32_t done_peers;  // bit q: exchange a done flag with rank q after the copy
  int done_slot0;       // first slot of the done flags in the pad
};

// Kept in ctx->user between calls.
struct State {
  uint32_t* epochs = nullptr;  // one epoch per block (device memory)
  int max_blocks = 0;
};

// Block b of this rank meets block b of every peer. Thread p talks to peer p.
// The leading __syncthreads puts the whole block's earlier stores before the
// release in kf_signal; the trailing one extends kf_wait's acquire to the block.
__device__ __forceinline__ void BlockBarrier(const PeerPads& pads, int rank, int world,
                                             uint32_t peers, int slot0, uint32_t epoch) {
  __syncthreads();
  const int peer = threadIdx.x;
  if (peer < world && peer != rank && ((peers >> peer) & 1u)) {
    kf_signal(pads.p[peer] + slot0 + blockIdx.x * world + rank, epoch);
    kf_wait(pads.p[rank] + slot0 + blockIdx.x * world + peer, epoch);
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads)
    BroadcastKernel(Plan plan, PeerPads pads, uint32_t* epochs, int rank, int world) {
  __shared__ uint32_t last_epoch;
  if (threadIdx.x == 0) last_epoch = epochs[blockIdx.x];
  __syncthreads();
  const uint32_t epoch = last_epoch + 1;

  BlockBarrier(pads, rank, world, ~0u, 0, epoch);  // the root's x and every y are ready

  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  uintptr_t align = reinterpret_cast<uintptr_t>(plan.src);
  for (int d = 0; d < plan.ndst; ++d) align |= reinterpret_cast<uintptr_t>(plan.dst[d]);
  // 16-byte units when every pointer allows them; the bytes past them one by one.
  const int64_t units = (align & 15) == 0 ? plan.bytes / 16 : 0;
  const uint4* s = reinterpret_cast<const uint4*>(plan.src);
  for (int64_t i = first; i < units; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      if (i + k * stride < units) v[k] = s[i + k * stride];
    }
    for (int d = 0; d < plan.ndst; ++d) {
      uint4* o = reinterpret_cast<uint4*>(plan.dst[d]);
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        if (i + k * stride < units) o[i + k * stride] = v[k];
      }
    }
  }
  for (int64_t i = units * 16 + first; i < plan.bytes; i += stride) {
    const char c = plan.src[i];
    for (int d = 0; d < plan.ndst; ++d) plan.dst[d][i] = c;
  }

  // Owners: every other owner's pushes into this y are done, and ours into theirs.
  if (plan.done_peers != 0)
    BlockBarrier(pads, rank, world, plan.done_peers, plan.done_slot0, epoch);

  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch;
}

// The task's root param, or -1 when it is missing or not a rank.
int Root(const kf_ctx* ctx) {
  const double r = kf_param(ctx, "root", -1.0);
  const int root = static_cast<int>(r);
  return (root == r && root >= 0 && root < ctx->world_size) ? root : -1;
}

int64_t Bytes(const kf_ctx* ctx) {
  return ctx->inputs[0].numel * static_cast<int64_t>(kf_dtype_size(ctx->inputs[0].dtype));
}

bool OneShot(int world, int64_t bytes) {
  return world <= 2 || (world - 2) * bytes < (int64_t{1} << 20);
}

// Scatter + all-gather: part j (of W-1, in whole 16-byte units) belongs to the j-th
// rank after the root.
int64_t PartBytes(int64_t bytes, int world) {
  return ((bytes + world - 2) / (world - 1) + 15) / 16 * 16;
}

// Fills the plan and the number of 16-byte units that sizes the grid, the same on
// every rank.
int BuildPlan(kf_ctx* ctx, Plan* plan, int64_t* grid_units) {
  const int root = Root(ctx);
  if (root < 0) return 1;
  const int world = ctx->world_size;
  const int rank = ctx->rank;
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  const int64_t bytes = Bytes(ctx);
  *plan = Plan{};
  plan->dst[0] = static_cast<char*>(y.data);
  plan->ndst = 1;
  if (OneShot(world, bytes)) {
    plan->src = static_cast<const char*>(x.peers[root]);
    plan->bytes = bytes;
    *grid_units = (bytes + 15) / 16;
    return 0;
  }
  const int64_t part = PartBytes(bytes, world);
  *grid_units = part / 16;
  if (rank == root) {  // the root's own y is a local copy
    plan->src = static_cast<const char*>(x.data);
    plan->bytes = bytes;
    return 0;
  }
  const int j = (rank - root - 1 + world) % world;
  const int64_t lo = j * part;
  const int64_t len = bytes - lo < part ? bytes - lo : part;
  plan->src = static_cast<const char*>(x.peers[root]) + (len > 0 ? lo : 0);
  plan->bytes = len > 0 ? len : 0;
  plan->dst[0] += len > 0 ? lo : 0;
  // The other non-root ranks, starting with the next, so that owners spread their writes.
  for (int k = 1; k < world; ++k) {
    const int q = (rank + k) % world;
    if (q == root) continue;
    plan->done_peers |= 1u << q;
    plan->dst[plan->ndst++] = static_cast<char*>(y.peers[q]) + (len > 0 ? lo : 0);
  }
  return 0;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size < 1 || ctx->world_size > KF_MAX_RANKS || ctx->world_size > 32) return 1;
  if (ctx->num_inputs < 1 || ctx->num_outputs < 1) return 1;
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& y = ctx->outputs[0];
  if (Root(ctx) < 0 || y.dtype != x.dtype || y.numel != x.numel) return 1;

  // Co-residency: when ranks share one GPU, each rank's grid must leave room for
  // the others' (a spinning grid that fills the GPU starves the peer it waits
  // for). The signal pad must hold 2 W slots per block (start barrier, done flags).
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int max_blocks = ctx->emulated ? sms / (2 * ctx->world_size) : sms;
  if (max_blocks < 1) max_blocks = 1;
  const size_t pad_blocks = ctx->signal_pad.nbytes / (sizeof(uint32_t) * 2 * ctx->world_size);
  if (pad_blocks < static_cast<size_t>(max_blocks)) max_blocks = static_cast<int>(pad_blocks);
  if (max_blocks < 1) return 1;

  State* st = new State;
  st->max_blocks = max_blocks;
  if (cudaMalloc(&st->epochs, sizeof(uint32_t) * max_blocks) != cudaSuccess ||
      cudaMemsetAsync(st->epochs, 0, sizeof(uint32_t) * max_blocks, ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
    cudaFree(st->epochs);
    delete st;
    return 1;
  }
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  const State* st = static_cast<const State*>(ctx->user);
  if (st == nullptr) return 1;
  Plan plan;
  int64_t grid_units = 0;
  if (BuildPlan(ctx, &plan, &grid_units) != 0) return 1;
  plan.done_slot0 = st->max_blocks * ctx->world_size;

  PeerPads pads;
  for (int q = 0; q < KF_MAX_RANKS; ++q) {
    pads.p[q] = q < ctx->world_size ? static_cast<uint32_t*>(ctx->signal_pad.peers[q]) : nullptr;
  }
  // grid_units is the same on every rank, so block b exists on every rank and the
  // per-block barriers pair up.
  int64_t blocks = (grid_units + kThreads - 1) / kThreads;
  if (blocks > st->max_blocks) blocks = st->max_blocks;
  if (blocks < 1) blocks = 1;
  BroadcastKernel<<<static_cast<int>(blocks), kThreads, 0, ctx->stream>>>(
      plan, pads, st->epochs, ctx->rank, ctx->world_size);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (cudaFree(st->epochs) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
