// EPLB rearrangement with the plan on the device and direct NVLink reads, no host round trip:
//   Plan:    one thread per local slot finds where its new weights come from (vLLM's rule,
//            from the two replicated maps): nowhere if unchanged, else (rank, row).
//   Round 0: flag barrier: every peer is in this call, its w13/w2 restored.
//   Pull:    every changed slot's rows, from whichever rank holds them, into this rank's
//            staging buffer (the workspace), 16 bytes at a time where aligned.
//   Round 1: flag barrier: every peer has finished reading this rank's old rows.
//   Store:   the staged rows into w13 and w2.
// A peer's next call reads this rank's rows only after its round 0, which this rank joins only
// after Store, so no end barrier is needed.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 512;

struct Peers {
  char* p[KF_MAX_RANKS];
};

struct Plan {
  int32_t* rank;  // [Lp]: source rank, -1 when unchanged
  int32_t* row;   // [Lp]: source row
};

struct Dims {
  int64_t lp;
  int64_t bytes[2];  // row bytes of w13, w2
  int world, rank, parts;
};

__global__ void MakePlan(const int64_t* __restrict__ old_map, const int64_t* __restrict__ new_map,
                         Dims d, Plan plan) {
  for (int64_t j = threadIdx.x; j < d.lp; j += blockDim.x) {
    const int64_t e = new_map[d.rank * d.lp + j];
    int32_t src = -1, row = -1;
    if (old_map[d.rank * d.lp + j] != e) {
      // first_q: the first row of rank q holding e before, -1 if none.
      auto first = [&](int q) -> int32_t {
        for (int64_t jj = 0; jj < d.lp; ++jj)
          if (old_map[q * d.lp + jj] == e) return static_cast<int32_t>(jj);
        return -1;
      };
      row = first(d.rank);
      src = d.rank;
      if (row < 0) {
        // vLLM: senders S and receivers V in rank order; receiver i of V takes S[i / n] or,
        // past m = |S| * n, S[i - m].
        int senders[KF_MAX_RANKS], ns = 0, nv = 0, me = -1;
        for (int q = 0; q < d.world; ++q) {
          bool had = false, has = false;
          for (int64_t jj = 0; jj < d.lp; ++jj) {
            had = had || old_map[q * d.lp + jj] == e;
            has = has || new_map[q * d.lp + jj] == e;
          }
          if (had) senders[ns++] = q;
          if (has && !had) {
            if (q == d.rank) me = nv;
            ++nv;
          }
        }
        if (ns == 0 || me < 0) {
          __trap();  // maps without the expert: not a valid placement
        }
        const int n = nv / ns, m = ns * n;
        src = me < m ? senders[me / n] : senders[me - m];
        row = first(src);
      }
    }
    plan.rank[j] = src;
    plan.row[j] = row;
  }
}

__global__ void Round(Peers pads, Dims d, uint32_t* epoch_ptr, int set) {
  const uint32_t epoch = *epoch_ptr + 1;
  __syncthreads();
  const int q = threadIdx.x;
  if (q < d.world && q != d.rank) {
    __threadfence_system();
    kf_signal(reinterpret_cast<uint32_t*>(pads.p[q]) + set * d.world + d.rank, epoch);
    kf_wait(reinterpret_cast<const uint32_t*>(pads.p[d.rank]) + set * d.world + q, epoch);
  }
  __syncthreads();
  if (set == 1 && threadIdx.x == 0) *epoch_ptr = epoch;
}

template <typename U>
__device__ __forceinline__ void CopyAs(char* dst, const char* src, int64_t n, int64_t first,
                                       int64_t stride) {
  constexpr int kUnroll = 4;
  const int64_t units = n / static_cast<int64_t>(sizeof(U));
  U* d = reinterpret_cast<U*>(dst);
  const U* s = reinterpret_cast<const U*>(src);
  for (int64_t i = first; i < units; i += kUnroll * stride) {
    U v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k)
      if (i + k * stride < units) v[k] = s[i + k * stride];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k)
      if (i + k * stride < units) d[i + k * stride] = v[k];
  }
  for (int64_t i = units * static_cast<int64_t>(sizeof(U)) + first; i < n; i += stride)
    dst[i] = src[i];
}

// Bytes [0, n) split over `parts` blocks: this block's share, copied with the widest access
// both pointers allow.
__device__ __forceinline__ void CopyPart(char* dst, const char* src, int64_t n, int part,
                                         int parts) {
  const int64_t per = ((n + parts - 1) / parts + 15) / 16 * 16;
  const int64_t lo = part * per;
  if (lo >= n) return;
  const int64_t len = lo + per < n ? per : n - lo;
  dst += lo;
  src += lo;
  const uintptr_t a = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src);
  if ((a & 15) == 0)
    CopyAs<uint4>(dst, src, len, threadIdx.x, blockDim.x);
  else if ((a & 3) == 0)
    CopyAs<uint32_t>(dst, src, len, threadIdx.x, blockDim.x);
  else
    CopyAs<uint8_t>(dst, src, len, threadIdx.x, blockDim.x);
}

struct Tensors {
  Peers w[2];    // w13, w2 of every rank
  char* buf[2];  // this rank's staging rows
};

// Block (part, j, tensor): part of slot j's new row, from its source into the buffer.
__global__ void __launch_bounds__(kThreads) Pull(Tensors t, Plan plan, Dims d) {
  const int64_t j = blockIdx.y;
  const int x = blockIdx.z;
  const int src = plan.rank[j];
  if (src < 0) return;
  const int64_t n = d.bytes[x];
  CopyPart(t.buf[x] + j * n, t.w[x].p[src] + plan.row[j] * n, n, blockIdx.x, d.parts);
}

__global__ void __launch_bounds__(kThreads) Store(Tensors t, Plan plan, Dims d) {
  const int64_t j = blockIdx.y;
  const int x = blockIdx.z;
  if (plan.rank[j] < 0) return;
  const int64_t n = d.bytes[x];
  CopyPart(t.w[x].p[d.rank] + j * n, t.buf[x] + j * n, n, blockIdx.x, d.parts);
}

struct State {
  Dims dims;
  Plan plan;
  uint32_t* epoch = nullptr;
  char* buf[2];
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int w = ctx->world_size;
  if (w < 1 || w > KF_MAX_RANKS) return 1;
  const kf_tensor* w13 = kf_input(ctx, "w13");
  const kf_tensor* w2 = kf_input(ctx, "w2");
  if (w13 == nullptr || w2 == nullptr || w13->ndim != 2 || w2->ndim != 2) return 1;
  if (ctx->signal_pad.nbytes < 2 * sizeof(uint32_t) * w) return 1;
  State* st = new State;
  Dims& d = st->dims;
  d.lp = w13->shape[0];
  d.bytes[0] = w13->shape[1] * static_cast<int64_t>(kf_dtype_size(w13->dtype));
  d.bytes[1] = w2->shape[1] * static_cast<int64_t>(kf_dtype_size(w2->dtype));
  d.world = w;
  d.rank = ctx->rank;
  // About four blocks per SM over all (slot, tensor) rows; rows of a few KB get one block.
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  const int64_t min_part = 64 * 1024;
  int64_t parts = (4 * sms + 2 * d.lp - 1) / (2 * d.lp);
  const int64_t largest = d.bytes[0] > d.bytes[1] ? d.bytes[0] : d.bytes[1];
  if (parts > (largest + min_part - 1) / min_part) parts = (largest + min_part - 1) / min_part;
  d.parts = static_cast<int>(parts < 1 ? 1 : parts);
  const size_t b13 = (static_cast<size_t>(d.lp * d.bytes[0]) + 255) / 256 * 256;
  st->buf[0] = static_cast<char*>(ctx->workspace.data);
  st->buf[1] = st->buf[0] + b13;
  if (b13 + static_cast<size_t>(d.lp * d.bytes[1]) > ctx->workspace.nbytes ||
      cudaMalloc(&st->epoch, sizeof(uint32_t) + 2 * sizeof(int32_t) * d.lp) != cudaSuccess) {
    delete st;
    return 1;
  }
  st->plan.rank = reinterpret_cast<int32_t*>(st->epoch + 1);
  st->plan.row = st->plan.rank + d.lp;
  if (cudaMemsetAsync(st->epoch, 0, sizeof(uint32_t), ctx->stream) != cudaSuccess ||
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
  if (st == nullptr) return 1;
  const Dims& d = st->dims;
  cudaStream_t s = ctx->stream;
  Tensors t;
  const kf_tensor* w13 = kf_input(ctx, "w13");
  const kf_tensor* w2 = kf_input(ctx, "w2");
  Peers pads = {};
  for (int q = 0; q < d.world; ++q) {
    t.w[0].p[q] = static_cast<char*>(w13->peers[q]);
    t.w[1].p[q] = static_cast<char*>(w2->peers[q]);
    pads.p[q] = static_cast<char*>(ctx->signal_pad.peers[q]);
  }
  t.buf[0] = st->buf[0];
  t.buf[1] = st->buf[1];
  const dim3 grid(d.parts, static_cast<unsigned>(d.lp), 2);
  MakePlan<<<1, 64, 0, s>>>(static_cast<const int64_t*>(kf_input(ctx, "old_map")->data),
                            static_cast<const int64_t*>(kf_input(ctx, "new_map")->data), d,
                            st->plan);
  Round<<<1, 32, 0, s>>>(pads, d, st->epoch, 0);
  Pull<<<grid, kThreads, 0, s>>>(t, st->plan, d);
  Round<<<1, 32, 0, s>>>(pads, d, st->epoch, 1);
  Store<<<grid, kThreads, 0, s>>>(t, st->plan, d);
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
