// Feature-gradient exchange fused with the scatter-add: after a start barrier
// (every peer's gradient rows are ready), a warp takes one received row k of
// rank r (chunk c, row i), reads it straight from rank q = (r + c) mod W (row
// ((W - c) mod W) * R + i of q's grad_output, through the peer pointers) and
// adds it into this rank's output row seed_inverse_ids[k]: each gradient row
// crosses the link once and is never staged, where the baseline receives into
// a buffer and reads it back. Vector float4 atomics (sm_90) when rows are
// 16-byte multiples. The output is zeroed first on the same stream.
//
// No end barrier: only peers' inputs are read and only this rank's output is
// written, and no peer can pass its next start barrier before this rank's
// kernel has finished.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

struct Peers {
  const float* grad[KF_MAX_RANKS];
  uint32_t* pad[KF_MAX_RANKS];
};

__global__ void __launch_bounds__(kThreads)
    ExchangeAdd(Peers p, const int64_t* __restrict__ ids, float* __restrict__ out,
                uint32_t* epochs, int rank, int world, int64_t rows_per_chunk, int64_t hidden) {
  __shared__ uint32_t epoch;
  if (threadIdx.x == 0) epoch = epochs[blockIdx.x] + 1;
  __syncthreads();
  const int peer = threadIdx.x;
  if (peer < world && peer != rank) {
    kf_signal(p.pad[peer] + blockIdx.x * world + rank, epoch);
    kf_wait(p.pad[rank] + blockIdx.x * world + peer, epoch);
  }
  __syncthreads();
  if (threadIdx.x == 0) epochs[blockIdx.x] = epoch;

  const int lane = threadIdx.x % 32;
  const int64_t total = rows_per_chunk * world;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; k < total;
       k += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int c = static_cast<int>(k / rows_per_chunk);
    const int64_t i = k - static_cast<int64_t>(c) * rows_per_chunk;
    const int q = (rank + c) % world;
    const float* src =
        p.grad[q] + (static_cast<int64_t>((world - c) % world) * rows_per_chunk + i) * hidden;
    float* dst = out + ids[k] * hidden;
    if (hidden % 4 == 0) {
      const float4* s4 = reinterpret_cast<const float4*>(src);
      float4* d4 = reinterpret_cast<float4*>(dst);
      for (int64_t j = lane; j < hidden / 4; j += 32) atomicAdd(d4 + j, s4[j]);
    } else {
      for (int64_t j = lane; j < hidden; j += 32) atomicAdd(dst + j, src[j]);
    }
  }
}

struct State {
  uint32_t* epochs = nullptr;
  int blocks = 0;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int world = ctx->world_size;
  if (world < 1 || world > kThreads || ctx->num_inputs < 2 || ctx->num_outputs < 1) return 1;
  const kf_tensor& grad = ctx->inputs[0];
  if (grad.dtype != KF_F32 || grad.ndim != 2 || grad.shape[0] % world != 0) return 1;
  // Ranks that share one GPU must all fit on it at once (their blocks spin on
  // each other's flags), and the pad holds W slots per block.
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int blocks = ctx->emulated ? sms / (2 * world) : 2 * sms;
  const int pad_blocks = static_cast<int>(ctx->signal_pad.nbytes / (sizeof(uint32_t) * world));
  if (blocks > pad_blocks) blocks = pad_blocks;
  if (blocks < 1) return 1;
  State* st = new State;
  st->blocks = blocks;
  if (cudaMalloc(&st->epochs, sizeof(uint32_t) * blocks) != cudaSuccess ||
      cudaMemsetAsync(st->epochs, 0, sizeof(uint32_t) * blocks, ctx->stream) != cudaSuccess ||
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
  const kf_tensor& grad = ctx->inputs[0];
  const kf_tensor& ids = ctx->inputs[1];
  kf_tensor& out = ctx->outputs[0];
  const int world = ctx->world_size;
  Peers p = {};
  for (int q = 0; q < world; ++q) {
    p.grad[q] = static_cast<const float*>(grad.peers[q]);
    p.pad[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
  }
  if (cudaMemsetAsync(out.data, 0, out.nbytes, ctx->stream) != cudaSuccess) return 1;
  ExchangeAdd<<<st->blocks, kThreads, 0, ctx->stream>>>(
      p, static_cast<const int64_t*>(ids.data), static_cast<float*>(out.data), st->epochs,
      ctx->rank, world, grad.shape[0] / world, grad.shape[1]);
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
