// Ulysses gather_seq_scatter_heads baseline, as VeOmni's list path does it (scatter_dim 2 > 1):
// torch.tensor_split(x, W, dim=2) and .contiguous() pack each rank's heads into a block of the
// workspace, the harness all-to-all (NCCL on real GPUs) exchanges the blocks, and torch.cat(dim=1)
// followed by the unpadding slice [:, :S] is one copy kernel that stacks the received blocks along
// the sequence, dropping positions past S. With B = 1 and no padding the stacked blocks are y
// itself, so the all-to-all receives straight into y.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

template <int N>
struct alignas(N) Unit {
  unsigned char b[N];
};

template <int N>
__device__ __forceinline__ void CopyRow(const Unit<N>* __restrict__ src, Unit<N>* __restrict__ dst,
                                        int64_t c) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < c;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[j] = src[j];
}

// Rows of c units, threadIdx.y picking the row within the block's rows and threadIdx.x the unit,
// so that short rows (a few heads) still fill the block.
__device__ __forceinline__ int64_t FirstRow() {
  return blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y;
}
__device__ __forceinline__ int64_t RowStride() {
  return static_cast<int64_t>(gridDim.y) * blockDim.y;
}

// send[p][i] = x[i][p]: position i (of B * T) and head block p, c units each.
template <int N>
__global__ void SplitHeads(const Unit<N>* x, Unit<N>* send, int64_t positions, int64_t c,
                           int world) {
  for (int64_t row = FirstRow(); row < positions * world; row += RowStride()) {
    const int64_t i = row / world, p = row - i * world;
    CopyRow<N>(x + row * c, send + (p * positions + i) * c, c);
  }
}

// y[b][p * T + t] = recv[p][b][t] for p * T + t < S.
template <int N>
__global__ void CatSequence(const Unit<N>* recv, Unit<N>* y, int64_t batch, int64_t t, int64_t s,
                            int64_t c, int world) {
  for (int64_t row = FirstRow(); row < world * batch * t; row += RowStride()) {
    const int64_t p = row / (batch * t), rest = row - p * batch * t;
    const int64_t b = rest / t, pos = p * t + (rest - b * t);
    if (pos < s) CopyRow<N>(recv + row * c, y + (b * s + pos) * c, c);
  }
}

struct Launch {
  dim3 grid, block;
};

// 256 threads: tx along a row (a multiple of 32, at most the row), 256 / tx rows side by side.
Launch Shape(int64_t rows, int64_t c) {
  const int64_t tx = c >= 256 ? 256 : (c + 31) / 32 * 32, ty = 256 / tx;
  const int64_t gx = (c + tx - 1) / tx < 64 ? (c + tx - 1) / tx : 64;
  const int64_t gy = (rows + ty - 1) / ty < 65535 ? (rows + ty - 1) / ty : 65535;
  return {dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)),
          dim3(static_cast<unsigned>(tx), static_cast<unsigned>(ty))};
}

template <int N>
int Run(kf_ctx* ctx, int64_t batch, int64_t t, int64_t s, int64_t run_bytes) {
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  const int world = ctx->world_size;
  const int64_t c = run_bytes / N, positions = batch * t;
  auto* send = static_cast<Unit<N>*>(ctx->workspace.data);
  Unit<N>* recv = send + positions * world * c;
  const bool direct = batch == 1 && s == world * t;
  if (direct) recv = static_cast<Unit<N>*>(y.data);
  Launch l = Shape(positions * world, c);
  SplitHeads<N><<<l.grid, l.block, 0, ctx->stream>>>(static_cast<const Unit<N>*>(x.data), send,
                                                     positions, c, world);
  if (cudaGetLastError() != cudaSuccess) return 1;
  if (kf_all_to_all(ctx, send, recv, static_cast<size_t>(x.numel / world), x.dtype) != 0) return 1;
  if (direct) return 0;
  CatSequence<N><<<l.grid, l.block, 0, ctx->stream>>>(recv, static_cast<Unit<N>*>(y.data), batch, t,
                                                      s, c, world);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& y = ctx->outputs[0];
  if (ctx->workspace.nbytes < 2 * x.nbytes) return 1;
  const int64_t batch = x.shape[0], t = x.shape[1], s = y.shape[1];
  const int64_t run = y.shape[2] * y.shape[3] * static_cast<int64_t>(kf_dtype_size(x.dtype));
  if (run % 16 == 0) return Run<16>(ctx, batch, t, s, run);
  if (run % 8 == 0) return Run<8>(ctx, batch, t, s, run);
  if (run % 4 == 0) return Run<4>(ctx, batch, t, s, run);
  if (run % 2 == 0) return Run<2>(ctx, batch, t, s, run);
  return Run<1>(ctx, batch, t, s, run);
}
