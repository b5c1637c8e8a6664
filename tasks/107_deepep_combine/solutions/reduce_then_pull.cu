// DeepEP-style combine on the device, in two rounds and no host round trip.
//   Round 1 (every peer is in this call: its routing is readable). Each rank, as an expert
//   rank, lays out the tokens it holds exactly as task 106's dispatch did (source rank,
//   then token order; a token's pairs in slot order): per chunk of 32 tokens of each source,
//   the tokens it holds and their pairs (a ballot and a warp scan), then a scan over all
//   chunks. It reduces every held token's experts into one partial row,
//       partial[j] = bf16( sum over its local slots of weight * expert_out[pair] )   (fp32 sum)
//   reading the weights from the source rank, into its own workspace (as DeepEP's callers
//   reduce the local experts before DeepEP's combine).
//   Round 2 (every peer's partial rows are ready). Each rank, as the tokens' rank, pulls for
//   every token one partial row from each rank its experts live on (the row index from that
//   rank's chunk offsets plus the token's place in its chunk, found with the same ballot on
//   its own routing) and sums them in fp32, in rank order, into bf16.
// A rank's workspace is rewritten only after round 1 of its next call, which no rank passes
// before every rank has finished round 2 of this call, so no end barrier is needed.
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kChunk = 32;
constexpr int kWarps = 8;
constexpr int kMaxK = 32;

struct Peers {
  void* p[KF_MAX_RANKS];
};

struct Dims {
  int64_t t, h, k, l;
  int world, rank, chunks, parts, gather_parts;  // parts: Reduce splits rows, gather_parts: Gather
};

// This rank's workspace; peers read row_off and partial.
struct Work {
  int32_t* row_count;      // [W * chunks]
  int32_t* pair_count;     // [W * chunks]
  int32_t* row_off;        // [W * chunks]: first partial row of chunk (p, c)
  int32_t* pair_off;       // [W * chunks]: first expert_out row of chunk (p, c)
  __nv_bfloat16* partial;  // [W * T][H]
  uint32_t* epoch;         // device memory, not in the workspace
};

struct Offsets {  // where row_off and partial sit inside a workspace (the same on every rank)
  size_t row_off, partial;
};

__device__ __forceinline__ int OwnerOf(int64_t e, int64_t l) { return static_cast<int>(e / l); }

// Handshake with every peer through pad slots [set * W + src]; epoch grows by one per call.
__device__ void Barrier(const Peers& pads, const Dims& d, int set, uint32_t epoch) {
  __syncthreads();
  const int q = threadIdx.x;
  if (q < d.world && q != d.rank) {
    __threadfence_system();
    kf_signal(static_cast<uint32_t*>(pads.p[q]) + set * d.world + d.rank, epoch);
    kf_wait(static_cast<const uint32_t*>(pads.p[d.rank]) + set * d.world + q, epoch);
  }
  __syncthreads();
}

__global__ void Round(Peers pads, Dims d, uint32_t* epoch_ptr, int set) {
  const uint32_t epoch = *epoch_ptr + 1;
  Barrier(pads, d, set, epoch);
  if (set == 1 && threadIdx.x == 0) *epoch_ptr = epoch;
}

// Block (c, p): how many of source p's tokens c*32 .. c*32+31 this rank holds, and their pairs.
__global__ void Count(Peers idx, Work w, Dims d) {
  const int p = blockIdx.y, c = blockIdx.x, lane = threadIdx.x;
  const int64_t t = static_cast<int64_t>(c) * kChunk + lane;
  const int64_t* src = static_cast<const int64_t*>(idx.p[p]);
  int pairs = 0;
  if (t < d.t)
    for (int64_t s = 0; s < d.k; ++s) pairs += OwnerOf(src[t * d.k + s], d.l) == d.rank ? 1 : 0;
  const unsigned held = __ballot_sync(0xffffffffu, pairs > 0);
  for (int o = 16; o > 0; o /= 2) pairs += __shfl_xor_sync(0xffffffffu, pairs, o);
  if (lane == 0) {
    w.row_count[p * d.chunks + c] = __popc(held);
    w.pair_count[p * d.chunks + c] = pairs;
  }
}

// Exclusive scans of both count arrays, 1024 entries at a time with a carry.
__global__ void __launch_bounds__(1024) Scan(Work w, Dims d) {
  __shared__ int32_t sums[2][32];
  __shared__ int32_t carry[2];
  const int n = d.world * d.chunks;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x < 2) carry[threadIdx.x] = 0;
  __syncthreads();
  for (int base = 0; base < n; base += 1024) {
    const int i = base + threadIdx.x;
    int32_t v[2] = {i < n ? w.row_count[i] : 0, i < n ? w.pair_count[i] : 0};
    int32_t incl[2] = {v[0], v[1]};
    for (int o = 1; o < 32; o *= 2) {
      for (int a = 0; a < 2; ++a) {
        const int32_t u = __shfl_up_sync(0xffffffffu, incl[a], o);
        if (lane >= o) incl[a] += u;
      }
    }
    if (lane == 31) {
      sums[0][warp] = incl[0];
      sums[1][warp] = incl[1];
    }
    __syncthreads();
    int32_t before[2] = {carry[0], carry[1]};
    for (int j = 0; j < warp; ++j) {
      before[0] += sums[0][j];
      before[1] += sums[1][j];
    }
    if (i < n) {
      w.row_off[i] = before[0] + incl[0] - v[0];
      w.pair_off[i] = before[1] + incl[1] - v[1];
    }
    __syncthreads();
    if (threadIdx.x < 2) {
      int32_t total = 0;
      for (int j = 0; j < 32; ++j) total += sums[threadIdx.x][j];
      carry[threadIdx.x] += total;
    }
    __syncthreads();
  }
}

// Columns [first, last) of a row in units of 8 bf16 (16 bytes) when aligned, else 1.
struct Span {
  int64_t first, last;
};

__device__ __forceinline__ Span PartOf(int64_t units, int part, int parts) {
  const int64_t per = (units + parts - 1) / parts;
  const int64_t first = part * per;
  return {first, first + per < units ? first + per : units};
}

__device__ __forceinline__ void Fma8(float* acc, const uint4& v, float wgt) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    acc[2 * i] += wgt * f.x;
    acc[2 * i + 1] += wgt * f.y;
  }
}

__device__ __forceinline__ uint4 Pack8(const float* acc) {
  uint4 v;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
  return v;
}

// Block (c, p, z): the partial rows of the tokens of chunk (p, c) this rank holds, part z.
__global__ void __launch_bounds__(kWarps * 32)
    Reduce(Peers idx, Peers wt, const __nv_bfloat16* __restrict__ y, Work w, Dims d, bool vec) {
  __shared__ int32_t first_pair[kChunk];
  __shared__ float weight[kChunk][kMaxK];  // the token's local weights, in slot order
  __shared__ int32_t npairs[kChunk], held;
  const int p = blockIdx.y, c = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t* src_idx = static_cast<const int64_t*>(idx.p[p]);
  const float* src_w = static_cast<const float*>(wt.p[p]);
  if (warp == 0) {
    const int64_t t = static_cast<int64_t>(c) * kChunk + lane;
    int n = 0;
    if (t < d.t)
      for (int64_t s = 0; s < d.k; ++s) n += OwnerOf(src_idx[t * d.k + s], d.l) == d.rank ? 1 : 0;
    const unsigned ballot = __ballot_sync(0xffffffffu, n > 0);
    int incl = n;
    for (int o = 1; o < 32; o *= 2) {
      const int u = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += u;
    }
    if (n > 0) {
      const int i = __popc(ballot & ((1u << lane) - 1u));
      first_pair[i] = w.pair_off[p * d.chunks + c] + incl - n;
      npairs[i] = n;
      int m = 0;
      for (int64_t s = 0; s < d.k; ++s)
        if (OwnerOf(src_idx[t * d.k + s], d.l) == d.rank) weight[i][m++] = src_w[t * d.k + s];
    }
    if (lane == 0) held = __popc(ballot);
  }
  __syncthreads();
  const int64_t row0 = w.row_off[p * d.chunks + c];
  for (int i = warp; i < held; i += kWarps) {
    __nv_bfloat16* dst = w.partial + (row0 + i) * d.h;
    const __nv_bfloat16* pairs = y + static_cast<int64_t>(first_pair[i]) * d.h;
    if (vec) {
      const Span sp = PartOf(d.h / 8, blockIdx.z, d.parts);
      for (int64_t u = sp.first + lane; u < sp.last; u += 32) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int m = 0; m < npairs[i]; ++m)
          Fma8(acc, reinterpret_cast<const uint4*>(pairs + m * d.h)[u], weight[i][m]);
        reinterpret_cast<uint4*>(dst)[u] = Pack8(acc);
      }
    } else {
      const Span sp = PartOf(d.h, blockIdx.z, d.parts);
      for (int64_t col = sp.first + lane; col < sp.last; col += 32) {
        float acc = 0.f;
        for (int m = 0; m < npairs[i]; ++m)
          acc += weight[i][m] * __bfloat162float(pairs[m * d.h + col]);
        dst[col] = __float2bfloat16_rn(acc);
      }
    }
  }
}

// Block (c, z): tokens c*32 .. c*32+31 of this rank: sum of the partial rows of every rank they
// reached, part z of each row.
__global__ void __launch_bounds__(kWarps * 32)
    Gather(const int64_t* __restrict__ idx, Peers ws, Offsets at, Dims d, __nv_bfloat16* out,
           bool vec) {
  __shared__ unsigned reached[KF_MAX_RANKS];
  __shared__ int32_t first_row[KF_MAX_RANKS];
  const int c = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (warp == 0) {
    const int64_t t = static_cast<int64_t>(c) * kChunk + lane;
    unsigned mask = 0;  // ranks token t reached
    if (t < d.t)
      for (int64_t s = 0; s < d.k; ++s) mask |= 1u << OwnerOf(idx[t * d.k + s], d.l);
    for (int q = 0; q < d.world; ++q) {
      const unsigned b = __ballot_sync(0xffffffffu, (mask >> q) & 1u);
      if (lane == 0) reached[q] = b;
    }
    if (lane < d.world) {
      const int32_t* row_off =
          reinterpret_cast<const int32_t*>(static_cast<const char*>(ws.p[lane]) + at.row_off);
      first_row[lane] = row_off[d.rank * d.chunks + c];
    }
  }
  __syncthreads();
  for (int i = warp; i < kChunk; i += kWarps) {
    const int64_t t = static_cast<int64_t>(c) * kChunk + i;
    if (t >= d.t) break;
    const __nv_bfloat16* rows[KF_MAX_RANKS];
    int n = 0;
    for (int q = 0; q < d.world; ++q) {
      if (!((reached[q] >> i) & 1u)) continue;
      const int64_t j = first_row[q] + __popc(reached[q] & ((1u << i) - 1u));
      rows[n++] =
          reinterpret_cast<const __nv_bfloat16*>(static_cast<const char*>(ws.p[q]) + at.partial) +
          j * d.h;
    }
    __nv_bfloat16* dst = out + t * d.h;
    if (vec) {
      const Span sp = PartOf(d.h / 8, blockIdx.z, d.gather_parts);
      for (int64_t u = sp.first + lane; u < sp.last; u += 32) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int m = 0; m < n; ++m) Fma8(acc, reinterpret_cast<const uint4*>(rows[m])[u], 1.f);
        reinterpret_cast<uint4*>(dst)[u] = Pack8(acc);
      }
    } else {
      const Span sp = PartOf(d.h, blockIdx.z, d.gather_parts);
      for (int64_t col = sp.first + lane; col < sp.last; col += 32) {
        float acc = 0.f;
        for (int m = 0; m < n; ++m) acc += __bfloat162float(rows[m][col]);
        dst[col] = __float2bfloat16_rn(acc);
      }
    }
  }
}

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

struct State {
  Dims dims;
  Work work;
  Offsets at;
  bool vec;
};

Peers PeersOf(const void* const* ptrs, int world) {
  Peers p = {};
  for (int q = 0; q < world; ++q) p.p[q] = const_cast<void*>(ptrs[q]);
  return p;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int w = ctx->world_size;
  if (w < 1 || w > KF_MAX_RANKS || w > 32) return 1;
  const kf_tensor* idx = kf_input(ctx, "topk_idx");
  const kf_tensor* y = kf_input(ctx, "expert_out");
  if (idx == nullptr || y == nullptr || idx->ndim != 2 || y->ndim != 2 || idx->shape[1] > kMaxK)
    return 1;
  if (ctx->signal_pad.nbytes < 2 * sizeof(uint32_t) * w) return 1;
  State* st = new State;
  Dims& d = st->dims;
  d.t = idx->shape[0];
  d.k = idx->shape[1];
  d.h = y->shape[1];
  d.l = static_cast<int64_t>(kf_param(ctx, "E", 0)) / w;
  d.world = w;
  d.rank = ctx->rank;
  d.chunks = static_cast<int>((d.t + kChunk - 1) / kChunk);
  st->vec = d.h % 8 == 0;  // rows of expert_out, partial and out then start 16-byte aligned
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  d.parts = 1;
  while (static_cast<int64_t>(d.chunks) * w * d.parts < 2 * sms && d.h / 8 / (2 * d.parts) >= 64)
    d.parts *= 2;
  d.gather_parts = 1;
  while (static_cast<int64_t>(d.chunks) * d.gather_parts < 2 * sms &&
         d.h / 8 / (2 * d.gather_parts) >= 64)
    d.gather_parts *= 2;
  char* base = static_cast<char*>(ctx->workspace.data);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off += Align(bytes);
    return at;
  };
  const size_t chunks = static_cast<size_t>(w) * d.chunks;
  const size_t row_count = take(chunks * 4), pair_count = take(chunks * 4);
  st->at.row_off = take(chunks * 4);
  const size_t pair_off = take(chunks * 4);
  st->at.partial = take(static_cast<size_t>(w * d.t * d.h) * 2);
  if (d.l < 1 || off > ctx->workspace.nbytes) {
    delete st;
    return 1;
  }
  st->work.row_count = reinterpret_cast<int32_t*>(base + row_count);
  st->work.pair_count = reinterpret_cast<int32_t*>(base + pair_count);
  st->work.row_off = reinterpret_cast<int32_t*>(base + st->at.row_off);
  st->work.pair_off = reinterpret_cast<int32_t*>(base + pair_off);
  st->work.partial = reinterpret_cast<__nv_bfloat16*>(base + st->at.partial);
  if (cudaMalloc(&st->work.epoch, sizeof(uint32_t)) != cudaSuccess) {
    delete st;
    return 1;
  }
  if (cudaMemsetAsync(st->work.epoch, 0, sizeof(uint32_t), ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
    cudaFree(st->work.epoch);
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
  const int w = d.world;
  cudaStream_t s = ctx->stream;
  const kf_tensor* idx = kf_input(ctx, "topk_idx");
  const kf_tensor* wt = kf_input(ctx, "topk_weights");
  const Peers idx_p = PeersOf(idx->peers, w), wt_p = PeersOf(wt->peers, w);
  const Peers pads = PeersOf(ctx->signal_pad.peers, w), ws = PeersOf(ctx->workspace.peers, w);
  const auto* y = static_cast<const __nv_bfloat16*>(kf_input(ctx, "expert_out")->data);
  auto* out = static_cast<__nv_bfloat16*>(kf_output(ctx, "out")->data);

  Round<<<1, 32, 0, s>>>(pads, d, st->work.epoch, 0);
  Count<<<dim3(d.chunks, w), kChunk, 0, s>>>(idx_p, st->work, d);
  Scan<<<1, 1024, 0, s>>>(st->work, d);
  Reduce<<<dim3(d.chunks, w, d.parts), kWarps * 32, 0, s>>>(idx_p, wt_p, y, st->work, d, st->vec);
  Round<<<1, 32, 0, s>>>(pads, d, st->work.epoch, 1);
  Gather<<<dim3(d.chunks, 1, d.gather_parts), kWarps * 32, 0, s>>>(
      static_cast<const int64_t*>(idx->data), ws, st->at, d, out, st->vec);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (cudaFree(st->work.epoch) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
