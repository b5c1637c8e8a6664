// Pipeline exchange by peer reads: stage r copies stage r-1's output_tensor into its
// input_tensor and stage r+1's input_tensor_grad into its output_tensor_grad. Only peers'
// inputs are read (they stay unchanged until every rank's call has returned) and only this
// rank's outputs are written, so no flag is needed at all.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 512;

// n bytes from src to dst (both 256-byte aligned): 16-byte units, four in flight per thread to
// cover the latency of remote reads, then the tail byte by byte.
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

// Blocks with an even index pull from the previous stage first, odd ones from the next, so both
// links are busy from the start.
__global__ void __launch_bounds__(kThreads)
    PullKernel(char* x, const char* y_prev, char* dy, const char* dx_next, int64_t bytes) {
  if (blockIdx.x % 2 == 0) {
    if (y_prev != nullptr) Copy(x, y_prev, bytes);
    if (dx_next != nullptr) Copy(dy, dx_next, bytes);
  } else {
    if (dx_next != nullptr) Copy(dy, dx_next, bytes);
    if (y_prev != nullptr) Copy(x, y_prev, bytes);
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size < 2 || ctx->world_size > KF_MAX_RANKS) return 1;
  if (kf_input(ctx, "output_tensor") == nullptr || kf_input(ctx, "input_tensor_grad") == nullptr ||
      kf_output(ctx, "input_tensor") == nullptr || kf_output(ctx, "output_tensor_grad") == nullptr)
    return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor* y = kf_input(ctx, "output_tensor");
  const kf_tensor* dx = kf_input(ctx, "input_tensor_grad");
  kf_tensor* x = kf_output(ctx, "input_tensor");
  kf_tensor* dy = kf_output(ctx, "output_tensor_grad");
  const int rank = ctx->rank, world = ctx->world_size;
  const bool first = rank == 0, last = rank == world - 1;
  const int64_t bytes = static_cast<int64_t>(first ? dy->nbytes : x->nbytes);
  const char* y_prev = first ? nullptr : static_cast<const char*>(y->peers[rank - 1]);
  const char* dx_next = last ? nullptr : static_cast<const char*>(dx->peers[rank + 1]);
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  int64_t blocks = (bytes / 16 + kThreads - 1) / kThreads;
  const int64_t cap = ctx->emulated ? (sms / ctx->world_size > 0 ? sms / ctx->world_size : 1) : 2 * sms;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  PullKernel<<<static_cast<int>(blocks), kThreads, 0, ctx->stream>>>(
      static_cast<char*>(x->data), y_prev, static_cast<char*>(dy->data), dx_next, bytes);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
