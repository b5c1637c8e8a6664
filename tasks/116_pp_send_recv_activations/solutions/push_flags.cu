// Pipeline exchange by direct peer writes with a flag handshake per block (the technique of
// TransformerEngine's userbuffers send/recv): stage r writes its output_tensor straight into
// stage r+1's input_tensor and its input_tensor_grad into stage r-1's output_tensor_grad.
//
// Per block b and call (epoch e, kept per block in device memory, so back-to-back calls never
// see a stale flag):
//   1. ready: tell each neighbour "I am in call e" (its writes into my outputs may start), and
//      wait until each neighbour I write to has said the same (its outputs are this call's);
//   2. block b of the grid writes its grid-strided share of both tensors, 16 bytes at a time;
//   3. done: raise the neighbour's done flag for block b, and wait for block b of each sender,
//      so that when this rank's stream ends, everything written into its outputs has landed.
// Signal pad: ready flags at [b * 2 + side], done flags after them at [2 * max_blocks + b * 2 +
// side], side 0 = from the previous stage, 1 = from the next.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 512;

// Kept in ctx->user between calls.
struct State {
  uint32_t* epochs = nullptr;  // one epoch per block (device memory)
  int max_blocks = 0;
};

struct Args {
  const char* send_next;  // this rank's output_tensor, or null on the last stage
  char* dst_next;         // stage r+1's input_tensor
  const char* send_prev;  // this rank's input_tensor_grad, or null on the first stage
  char* dst_prev;         // stage r-1's output_tensor_grad
  int64_t bytes;          // of one tensor
  uint32_t* pad;          // this rank's pad
  uint32_t* pad_prev;     // null on the first stage
  uint32_t* pad_next;     // null on the last stage
  int max_blocks;
};

// n bytes from src to dst (both 256-byte aligned): 16-byte units, four in flight per thread,
// then the tail byte by byte.
__device__ __forceinline__ void Copy(char* dst, const char* src, int64_t n) {
  constexpr int kUnroll = 4;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t units = n / 16;
  const uint4* s = reinterpret_cast<const uint4*>(src);
  uint4* d = reinterpret_cast<uint4*>(dst);
  for (int64_t i = first; i < units; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k)
      if (i + k * stride < units) v[k] = s[i + k * stride];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k)
      if (i + k * stride < units) d[i + k * stride] = v[k];
  }
  for (int64_t i = units * 16 + first; i < n; i += stride) dst[i] = src[i];
}

__global__ void __launch_bounds__(kThreads) PushKernel(Args a, uint32_t* epochs) {
  __shared__ uint32_t last_epoch;
  if (threadIdx.x == 0) last_epoch = epochs[blockIdx.x];
  __syncthreads();
  const uint32_t e = last_epoch + 1;
  const int b = blockIdx.x;
  uint32_t* ready = a.pad + b * 2;
  uint32_t* done = a.pad + 2 * a.max_blocks + b * 2;
  const int64_t ready_off = b * 2, done_off = 2 * a.max_blocks + b * 2;

  // 1. Thread 0 deals with the next stage, thread 1 with the previous one.
  if (threadIdx.x == 0 && a.pad_next != nullptr) {
    kf_signal(a.pad_next + ready_off + 0, e);  // I am the next stage's previous one
    kf_wait(ready + 1, e);
  } else if (threadIdx.x == 1 && a.pad_prev != nullptr) {
    kf_signal(a.pad_prev + ready_off + 1, e);
    kf_wait(ready + 0, e);
  }
  __syncthreads();

  // 2. The writes.
  if (a.send_next != nullptr) Copy(a.dst_next, a.send_next, a.bytes);
  if (a.send_prev != nullptr) Copy(a.dst_prev, a.send_prev, a.bytes);

  // 3. The leading __syncthreads puts the whole block's stores before the release in kf_signal;
  // the receiver's acquire in kf_wait then sees them.
  __syncthreads();
  if (threadIdx.x == 0 && a.pad_next != nullptr) {
    kf_signal(a.pad_next + done_off + 0, e);
    kf_wait(done + 1, e);  // the next stage's gradient has landed here
  } else if (threadIdx.x == 1 && a.pad_prev != nullptr) {
    kf_signal(a.pad_prev + done_off + 1, e);
    kf_wait(done + 0, e);  // the previous stage's activations have landed here
  }
  __syncthreads();
  if (threadIdx.x == 0) epochs[blockIdx.x] = e;
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size < 2 || ctx->world_size > KF_MAX_RANKS) return 1;
  if (kf_input(ctx, "output_tensor") == nullptr || kf_input(ctx, "input_tensor_grad") == nullptr ||
      kf_output(ctx, "input_tensor") == nullptr || kf_output(ctx, "output_tensor_grad") == nullptr)
    return 1;
  // Co-residency: blocks spin on their neighbours' flags, so when ranks share one GPU every
  // rank's grid must fit beside the others'. The pad holds 4 flags per block.
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int max_blocks = ctx->emulated ? sms / (2 * ctx->world_size) : sms;
  if (max_blocks < 1) max_blocks = 1;
  const size_t pad_blocks = ctx->signal_pad.nbytes / (4 * sizeof(uint32_t));
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
  const kf_tensor* y = kf_input(ctx, "output_tensor");
  const kf_tensor* dx = kf_input(ctx, "input_tensor_grad");
  const kf_tensor* x = kf_output(ctx, "input_tensor");
  const kf_tensor* dy = kf_output(ctx, "output_tensor_grad");
  const int rank = ctx->rank, world = ctx->world_size;
  const bool first = rank == 0, last = rank == world - 1;

  Args a = {};
  // One tensor's bytes: every rank has at least one non-empty tensor, and the grid below depends
  // only on it, so block b exists on every rank and the per-block handshakes pair up.
  const int64_t bytes = static_cast<int64_t>(last ? dx->nbytes : y->nbytes);
  a.bytes = bytes;
  a.pad = static_cast<uint32_t*>(ctx->signal_pad.data);
  a.max_blocks = st->max_blocks;
  if (!last) {
    a.send_next = static_cast<const char*>(y->data);
    a.dst_next = static_cast<char*>(x->peers[rank + 1]);
    a.pad_next = static_cast<uint32_t*>(ctx->signal_pad.peers[rank + 1]);
  }
  if (!first) {
    a.send_prev = static_cast<const char*>(dx->data);
    a.dst_prev = static_cast<char*>(dy->peers[rank - 1]);
    a.pad_prev = static_cast<uint32_t*>(ctx->signal_pad.peers[rank - 1]);
  }
  int64_t blocks = (bytes / 16 + kThreads - 1) / kThreads;
  if (blocks > st->max_blocks) blocks = st->max_blocks;
  if (blocks < 1) blocks = 1;
  PushKernel<<<static_cast<int>(blocks), kThreads, 0, ctx->stream>>>(a, st->epochs);
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
