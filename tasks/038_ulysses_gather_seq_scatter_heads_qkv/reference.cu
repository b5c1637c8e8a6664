// Ulysses gather_seq_scatter_heads_qkv baseline, as VeOmni does it: the projection viewed as
// [B, T, 3, Q]; torch.tensor_split over Q (scatter_dim 3) and .contiguous() pack rank p's columns
// of q, k and v into block p of the workspace; the harness all-to-all (NCCL on real GPUs)
// exchanges the blocks; torch.cat over the sequence, the view back to [B, W * T, 3 * ql] and the
// unpadding slice [:, :S] are one copy kernel. With B = 1 and no padding the stacked blocks are y
// itself, so the all-to-all receives straight into y.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

struct Dims {
  int64_t batch, t, s;
  int world;
};

// dst row `row` (of c units) = src row `from`. kSplit: the pack, dst [W][B * T][3] rows of ql
// from x's [B * T][3][W] rows; else the stacking, dst [B][S] rows of 3 * ql from the received
// [W][B][T] rows, positions past S dropped.
template <typename U, bool kSplit>
__global__ void Move(const U* __restrict__ src, U* __restrict__ dst, Dims d, int64_t rows,
                     int64_t c) {
  for (int64_t row = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; row < rows;
       row += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    int64_t from;
    if constexpr (kSplit) {
      const int64_t part = 3 * d.batch * d.t, p = row / part;  // part: rows per destination rank
      from = (row - p * part) * d.world + p;
    } else {
      const int64_t b = row / d.s, pos = row - b * d.s, p = pos / d.t;
      from = (p * d.batch + b) * d.t + (pos - p * d.t);
    }
    const U* s = src + from * c;
    U* o = dst + row * c;
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < c;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x)
      o[j] = s[j];
  }
}

template <typename U, bool kSplit>
int Launch(const void* src, void* dst, const Dims& d, int64_t rows, int64_t c, cudaStream_t st) {
  const unsigned tx = c >= 256 ? 256 : static_cast<unsigned>((c + 31) / 32 * 32), ty = 256 / tx;
  const int64_t gx = (c + tx - 1) / tx < 64 ? (c + tx - 1) / tx : 64;
  const int64_t gy = (rows + ty - 1) / ty < 65535 ? (rows + ty - 1) / ty : 65535;
  Move<U, kSplit>
      <<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), dim3(tx, ty), 0, st>>>(
          static_cast<const U*>(src), static_cast<U*>(dst), d, rows, c);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

// ql: one rank's columns of one of q, k, v, in units of U.
template <typename U>
int Run(kf_ctx* ctx, const Dims& d, int64_t ql) {
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  char* send = static_cast<char*>(ctx->workspace.data);
  void* recv = send + x.nbytes;
  const bool direct = d.batch == 1 && d.s == d.world * d.t;
  if (direct) recv = y.data;
  if (Launch<U, true>(x.data, send, d, d.world * d.batch * d.t * 3, ql, ctx->stream) != 0) return 1;
  if (kf_all_to_all(ctx, send, recv, static_cast<size_t>(x.numel / d.world), x.dtype) != 0)
    return 1;
  if (direct) return 0;
  return Launch<U, false>(recv, y.data, d, d.batch * d.s, 3 * ql, ctx->stream);
}

}  // namespace

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& y = ctx->outputs[0];
  if (ctx->workspace.nbytes < 2 * x.nbytes) return 1;
  const Dims d = {x.shape[0], x.shape[1], y.shape[1], ctx->world_size};
  const int64_t ql = y.shape[2] / 3 * static_cast<int64_t>(kf_dtype_size(x.dtype));  // bytes
  if (ql % 16 == 0) return Run<uint4>(ctx, d, ql / 16);
  if (ql % 4 == 0) return Run<uint32_t>(ctx, d, ql / 4);
  return Run<uint8_t>(ctx, d, ql);
}
