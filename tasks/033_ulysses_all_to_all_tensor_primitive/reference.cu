// Ulysses all_to_all_tensor baseline (scatter_dim 0, gather_dim 1), as VeOmni's list path does it:
// torch.tensor_split(x, W, 0) cuts x into W contiguous [m, C] blocks, so they go to the harness
// all-to-all (NCCL on real GPUs) as they are, landing in the workspace block by block; then
// torch.cat(outputs, dim=1) is one copy kernel that lays the W received blocks side by side.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

template <int N>
struct alignas(N) Unit {
  unsigned char b[N];
};

// y[i][p * c + j] = recv[p][i][j], with c and j counted in N-byte units. One row of y's blocks
// per grid row, so the division happens once per row, not per element.
template <int N>
__global__ void CatColumns(const Unit<N>* __restrict__ recv, Unit<N>* __restrict__ y, int64_t m,
                           int64_t c, int world) {
  for (int64_t row = blockIdx.y; row < m * world; row += gridDim.y) {
    const int64_t i = row / world, p = row - i * world;
    const Unit<N>* src = recv + (p * m + i) * c;
    Unit<N>* dst = y + row * c;
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < c;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x)
      dst[j] = src[j];
  }
}

template <int N>
int Launch(const void* recv, void* y, int64_t m, int64_t bytes_per_row, int world, cudaStream_t s) {
  const int64_t c = bytes_per_row / N, rows = m * world;
  const int64_t gx = c < 256 * 64 ? (c + 255) / 256 : 64;
  const int64_t gy = rows < 65535 ? rows : 65535;
  CatColumns<N><<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), 256, 0, s>>>(
      static_cast<const Unit<N>*>(recv), static_cast<Unit<N>*>(y), m, c, world);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  const int world = ctx->world_size;
  const int64_t m = y.shape[0], row = x.shape[1] * static_cast<int64_t>(kf_dtype_size(x.dtype));
  if (ctx->workspace.nbytes < x.nbytes) return 1;
  void* recv = ctx->workspace.data;
  if (kf_all_to_all(ctx, x.data, recv, static_cast<size_t>(x.numel / world), x.dtype) != 0)
    return 1;
  if (row % 16 == 0) return Launch<16>(recv, y.data, m, row, world, ctx->stream);
  if (row % 8 == 0) return Launch<8>(recv, y.data, m, row, world, ctx->stream);
  if (row % 4 == 0) return Launch<4>(recv, y.data, m, row, world, ctx->stream);
  if (row % 2 == 0) return Launch<2>(recv, y.data, m, row, world, ctx->stream);
  return Launch<1>(recv, y.data, m, row, world, ctx->stream);
}
