// KV block transfer baseline, as vLLM's P2pNcclConnector does it per layer: the prefill
// rank gathers the request's blocks (layer[block_ids]) into one contiguous buffer and
// sends it with one NCCL send; the decode rank receives it and scatters it into its
// blocks (inject_kv_into_layer: layer[block_ids] = kv).
#include <cuda_runtime.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

// Copies `block_bytes`-byte blocks: dst block i (or dst_ids[i]) <- src block src_ids[i] (or i).
// 16-byte moves when every block is a multiple of 16 bytes (buffers are 256-byte aligned).
__global__ void MoveBlocks(const uint8_t* src, const int32_t* src_ids, uint8_t* dst,
                           const int32_t* dst_ids, int64_t n, int64_t block_bytes) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t s = src_ids ? src_ids[i] : i, t = dst_ids ? dst_ids[i] : i;
    const uint8_t* from = src + s * block_bytes;
    uint8_t* to = dst + t * block_bytes;
    if (block_bytes % 16 == 0) {
      for (int64_t j = threadIdx.x; j < block_bytes / 16; j += blockDim.x)
        reinterpret_cast<int4*>(to)[j] = reinterpret_cast<const int4*>(from)[j];
    } else {
      for (int64_t j = threadIdx.x; j < block_bytes; j += blockDim.x) to[j] = from[j];
    }
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const int g = kf_group_index(ctx, "pd");
  if (g < 0) return 1;
  const kf_group& pd = ctx->groups[g];
  const kf_tensor& cache = *kf_input(ctx, "kv_cache");
  const kf_tensor& ids = *kf_input(ctx, "block_ids");
  const int64_t nr = ids.numel;
  const int64_t block_bytes = static_cast<int64_t>(cache.nbytes) / cache.shape[0];
  const size_t bytes = static_cast<size_t>(nr * block_bytes);
  if (bytes > ctx->workspace.nbytes) return 2;
  uint8_t* staging = static_cast<uint8_t*>(ctx->workspace.data);
  const int peer = pd.ranks[1 - pd.rank];
  const int grid = static_cast<int>(nr < 1024 ? nr : 1024);
  if (nr == 0) return 0;
  if (pd.rank == 0) {  // prefill: gather, then send
    MoveBlocks<<<grid, 256, 0, ctx->stream>>>(static_cast<const uint8_t*>(cache.data),
                                              static_cast<const int32_t*>(ids.data), staging,
                                              nullptr, nr, block_bytes);
    if (cudaGetLastError() != cudaSuccess) return 3;
    if (kf_group_start(ctx) != 0) return 4;
    if (kf_send(ctx, staging, bytes, KF_U8, peer) != 0) return 5;
    if (kf_group_end(ctx) != 0) return 6;
  } else {  // decode: receive, then scatter
    if (kf_group_start(ctx) != 0) return 4;
    if (kf_recv(ctx, staging, bytes, KF_U8, peer) != 0) return 5;
    if (kf_group_end(ctx) != 0) return 6;
    MoveBlocks<<<grid, 256, 0, ctx->stream>>>(staging, nullptr, static_cast<uint8_t*>(cache.data),
                                              static_cast<const int32_t*>(ids.data), nr,
                                              block_bytes);
    if (cudaGetLastError() != cudaSuccess) return 3;
  }
  return 0;
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
