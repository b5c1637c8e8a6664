// GNN feature exchange baseline, as GraphBolt does it: gather the local rows
// by id (index_select) into the workspace, then the rank-rotated all-to-all
// as one group of harness sends and receives (NCCL's on real GPUs): rank r
// sends its chunk c to rank (r + c) mod W and receives that rank's chunk into
// out chunk c.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

template <typename T>
__global__ void GatherRows(const T* __restrict__ feats, const int64_t* __restrict__ ids,
                           T* __restrict__ out, int64_t rows, int64_t hidden) {
  const int64_t n = rows * hidden;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = k / hidden;
    out[k] = feats[ids[row] * hidden + (k - row * hidden)];
  }
}

}  // namespace

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& feats = ctx->inputs[0];
  const kf_tensor& ids = ctx->inputs[1];
  kf_tensor& out = ctx->outputs[0];
  const int world = ctx->world_size, rank = ctx->rank;
  const int64_t rows = ids.numel, hidden = out.shape[1];
  const size_t elem = kf_dtype_size(out.dtype);
  if (ctx->workspace.nbytes < out.nbytes) return 1;
  int64_t want = (rows * hidden + 255) / 256;
  const int grid = static_cast<int>(want < 1 ? 1 : (want > 4096 ? 4096 : want));
  if (elem == 2) {
    GatherRows<<<grid, 256, 0, ctx->stream>>>(
        static_cast<const uint16_t*>(feats.data), static_cast<const int64_t*>(ids.data),
        static_cast<uint16_t*>(ctx->workspace.data), rows, hidden);
  } else {
    GatherRows<<<grid, 256, 0, ctx->stream>>>(
        static_cast<const uint32_t*>(feats.data), static_cast<const int64_t*>(ids.data),
        static_cast<uint32_t*>(ctx->workspace.data), rows, hidden);
  }
  if (cudaGetLastError() != cudaSuccess) return 1;
  const size_t chunk = static_cast<size_t>(rows / world * hidden);
  const char* gathered = static_cast<const char*>(ctx->workspace.data);
  char* dst = static_cast<char*>(out.data);
  if (kf_group_start(ctx) != 0) return 1;
  for (int c = 0; c < world; ++c) {
    const int peer = (rank + c) % world;
    if (kf_send(ctx, gathered + c * chunk * elem, chunk, out.dtype, peer) != 0 ||
        kf_recv(ctx, dst + c * chunk * elem, chunk, out.dtype, peer) != 0) {
      kf_group_end(ctx);
      return 1;
    }
  }
  return kf_group_end(ctx);
}
