// Ulysses variable all-gather baseline, as VeOmni's _all_gather does it: every rank's shape is
// all-gathered (one harness all-gather of 3 int64s) and read to the host (.tolist()), then
// dist.all_gather of shards of different sizes, which NCCL runs as grouped sends and receives:
// here one kf_all_to_allv in which every rank sends its whole shard to every peer. torch.cat
// along the sequence is a copy kernel that interleaves the received shards per batch row; with
// B = 1 the shards laid end to end are y itself, so they are received straight into y.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kDims = 3;  // [B, n, C]

__global__ void OwnShape(int64_t* shape, int64_t b, int64_t n, int64_t c) {
  shape[0] = b;
  shape[1] = n;
  shape[2] = c;
}

struct Shards {
  int64_t off[KF_MAX_RANKS + 1];  // off[p]: rank p's first position in y; off[W] = N
  int world;
};

// y[b][s] = stage[p][b][s - off[p]] for off[p] <= s < off[p + 1]: one row of `row` bytes per
// (b, s), threadIdx.y picking the row and threadIdx.x the 4-byte word (or byte) within it.
template <typename U>
__global__ void CatSequence(const U* stage, U* y, Shards sh, int64_t batch, int64_t c) {
  const int64_t total = sh.off[sh.world], rows = batch * total;
  for (int64_t row = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    const int64_t b = row / total, s = row - b * total;
    int p = 0;
    while (s >= sh.off[p + 1]) ++p;
    const int64_t n = sh.off[p + 1] - sh.off[p];
    const U* src = stage + (batch * sh.off[p] + b * n + (s - sh.off[p])) * c;
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < c;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x)
      y[row * c + j] = src[j];
  }
}

template <typename U>
int Cat(const void* stage, void* y, const Shards& sh, int64_t batch, int64_t c, cudaStream_t s) {
  const int64_t rows = batch * sh.off[sh.world];
  if (rows == 0 || c == 0) return 0;  // nothing to move (W = 1 with an empty shard)
  const unsigned tx = c >= 256 ? 256 : static_cast<unsigned>((c + 31) / 32 * 32), ty = 256 / tx;
  const int64_t gx = (c + tx - 1) / tx < 64 ? (c + tx - 1) / tx : 64;
  const int64_t gy = (rows + ty - 1) / ty < 65535 ? (rows + ty - 1) / ty : 65535;
  CatSequence<U>
      <<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), dim3(tx, ty), 0, s>>>(
          static_cast<const U*>(stage), static_cast<U*>(y), sh, batch, c);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  const int world = ctx->world_size;
  const int64_t batch = x.shape[0], c = x.shape[2];
  const size_t elem = kf_dtype_size(x.dtype);
  // Workspace: every rank's shape, then (for B > 1) the received shards.
  auto* shapes = static_cast<int64_t*>(ctx->workspace.data);
  const size_t stage_at = ((world + 1) * kDims * sizeof(int64_t) + 255) / 256 * 256;
  char* stage = static_cast<char*>(ctx->workspace.data) + stage_at;
  if (ctx->workspace.nbytes < stage_at + y.nbytes || world > KF_MAX_RANKS) return 1;

  OwnShape<<<1, 1, 0, ctx->stream>>>(shapes + world * kDims, batch, x.shape[1], c);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_gather(ctx, shapes + world * kDims, shapes, kDims, KF_I64) != 0) return 1;
  int64_t host[KF_MAX_RANKS * kDims];
  if (cudaMemcpyAsync(host, shapes, sizeof(int64_t) * kDims * world, cudaMemcpyDeviceToHost,
                      ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess)
    return 1;

  Shards sh = {};
  sh.world = world;
  size_t send_counts[KF_MAX_RANKS], send_displs[KF_MAX_RANKS];
  size_t recv_counts[KF_MAX_RANKS], recv_displs[KF_MAX_RANKS];
  for (int p = 0; p < world; ++p) {
    send_counts[p] = static_cast<size_t>(x.numel);  // the whole shard to every rank
    send_displs[p] = 0;
    recv_counts[p] =
        static_cast<size_t>(host[p * kDims] * host[p * kDims + 1] * host[p * kDims + 2]);
    recv_displs[p] = static_cast<size_t>(batch * sh.off[p] * c);
    sh.off[p + 1] = sh.off[p] + host[p * kDims + 1];
  }
  if (batch * sh.off[world] * c != y.numel) return 1;  // the shards do not make up y
  void* recv = batch == 1 ? y.data : static_cast<void*>(stage);
  if (kf_all_to_allv(ctx, x.data, send_counts, send_displs, recv, recv_counts, recv_displs,
                     x.dtype) != 0)
    return 1;
  if (batch == 1) return 0;
  const int64_t row = c * static_cast<int64_t>(elem);
  if (row % 4 == 0) return Cat<uint32_t>(stage, y.data, sh, batch, row / 4, ctx->stream);
  return Cat<uint8_t>(stage, y.data, sh, batch, row, ctx->stream);
}
