// Ulysses gather_heads_scatter_seq baseline, as VeOmni does it: pad the sequence with zeros to a
// multiple of W, torch.tensor_split along the sequence (each rank's positions made contiguous),
// the harness all-to-all (NCCL on real GPUs), then torch.cat along the heads. The padding and the
// split are one copy kernel into the workspace (skipped when B = 1 and W divides S: the blocks are
// then slices of x itself, as .contiguous() finds them); the cat is a second copy kernel.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

struct Layout {
  int64_t batch, s, t, c;  // c: one position's heads in units of U (16, 4 or 1 bytes)
  int world;
};

// send[p][b][t] = x[b][p * T + t], zeros past S. Row (p, b, t) of c units.
template <typename U>
__global__ void PadAndSplit(const U* x, U* send, Layout l) {
  const int64_t rows = l.world * l.batch * l.t;
  for (int64_t row = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    const int64_t p = row / (l.batch * l.t), rest = row - p * l.batch * l.t;
    const int64_t b = rest / l.t, pos = p * l.t + (rest - b * l.t);
    const U* src = x + (b * l.s + pos) * l.c;
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < l.c;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x)
      send[row * l.c + j] = pos < l.s ? src[j] : U{};
  }
}

// y[b][t][p] = recv[p][b][t]. Row (b, t, p) of c units.
template <typename U>
__global__ void CatHeads(const U* recv, U* y, Layout l) {
  const int64_t rows = l.batch * l.t * l.world;
  for (int64_t row = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    const int64_t bt = row / l.world, p = row - bt * l.world;
    const U* src = recv + (p * l.batch * l.t + bt) * l.c;
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < l.c;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x)
      y[row * l.c + j] = src[j];
  }
}

template <typename U>
int Run(kf_ctx* ctx, Layout l) {
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  const int64_t rows = l.world * l.batch * l.t;
  const unsigned tx = l.c >= 256 ? 256 : static_cast<unsigned>((l.c + 31) / 32 * 32), ty = 256 / tx;
  const int64_t gx = (l.c + tx - 1) / tx < 64 ? (l.c + tx - 1) / tx : 64;
  const int64_t gy = (rows + ty - 1) / ty < 65535 ? (rows + ty - 1) / ty : 65535;
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), block(tx, ty);
  U* send = static_cast<U*>(ctx->workspace.data);
  U* recv = send + rows * l.c;
  if (l.batch == 1 && l.s == l.world * l.t) {
    send = static_cast<U*>(x.data);
  } else {
    PadAndSplit<U><<<grid, block, 0, ctx->stream>>>(static_cast<const U*>(x.data), send, l);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  if (kf_all_to_all(ctx, send, recv, static_cast<size_t>(y.numel / l.world), y.dtype) != 0)
    return 1;
  CatHeads<U><<<grid, block, 0, ctx->stream>>>(recv, static_cast<U*>(y.data), l);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& y = ctx->outputs[0];
  if (ctx->workspace.nbytes < 2 * y.nbytes) return 1;
  const int64_t run = x.shape[2] * x.shape[3] * static_cast<int64_t>(kf_dtype_size(x.dtype));
  Layout l = {x.shape[0], x.shape[1], y.shape[1], run, ctx->world_size};
  const int unit = run % 16 == 0 ? 16 : run % 4 == 0 ? 4 : 1;
  l.c = run / unit;
  if (unit == 16) return Run<uint4>(ctx, l);
  return unit == 4 ? Run<uint32_t>(ctx, l) : Run<uint8_t>(ctx, l);
}
