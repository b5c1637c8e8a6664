// GNN feature exchange backward baseline, as GraphBolt does it: the
// rank-rotated all-to-all of the gradient rows into the workspace as one group
// of harness sends and receives (NCCL's on real GPUs), then a scatter-add of
// the received rows by this rank's ids (torch.sparse.mm's result; f32
// atomics) into the zeroed output.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

__global__ void ScatterAdd(const float* __restrict__ recv, const int64_t* __restrict__ ids,
                           float* __restrict__ out, int64_t rows, int64_t hidden) {
  const int64_t n = rows * hidden;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = k / hidden;
    atomicAdd(out + ids[row] * hidden + (k - row * hidden), recv[k]);
  }
}

}  // namespace

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& grad = ctx->inputs[0];
  const kf_tensor& ids = ctx->inputs[1];
  kf_tensor& out = ctx->outputs[0];
  const int world = ctx->world_size, rank = ctx->rank;
  const int64_t rows = ids.numel, hidden = grad.shape[1];
  if (ctx->workspace.nbytes < grad.nbytes || grad.dtype != KF_F32) return 1;
  const size_t chunk = static_cast<size_t>(rows / world * hidden);
  const float* send = static_cast<const float*>(grad.data);
  float* recv = static_cast<float*>(ctx->workspace.data);
  if (kf_group_start(ctx) != 0) return 1;
  for (int c = 0; c < world; ++c) {
    const int peer = (rank + c) % world;
    if (kf_send(ctx, send + c * chunk, chunk, KF_F32, peer) != 0 ||
        kf_recv(ctx, recv + c * chunk, chunk, KF_F32, peer) != 0) {
      kf_group_end(ctx);
      return 1;
    }
  }
  if (kf_group_end(ctx) != 0) return 1;
  if (cudaMemsetAsync(out.data, 0, out.nbytes, ctx->stream) != cudaSuccess) return 1;
  const int64_t blocks = (rows * hidden + 255) / 256;
  ScatterAdd<<<static_cast<int>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096), 256, 0,
               ctx->stream>>>(recv, static_cast<const int64_t*>(ids.data),
                              static_cast<float*>(out.data), rows, hidden);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
