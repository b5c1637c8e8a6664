// Variable all-gather on the copy engines, without exchanging the lengths: every rank's length
// follows from the task's formula n_p = a + d * (W - 1 - p) (a and d are ctx params), so the host
// knows every shard's place in y before the call, and the baseline's shape exchange with its
// device-to-host read (a full stream synchronisation per call) disappears. After a one-block
// barrier kernel (every peer's x is in place), one peer-to-peer copy per rank pulls rank p's shard
// into y: B rows of n_p * C elements at y's row pitch N * C, so torch.cat's interleave along the
// sequence rides on the copy engine's strides. Copies start with this rank's own shard and go on
// with the next ranks, so that the ranks read from different peers at once; empty shards are
// skipped.
//
// No end barrier: only peers' inputs are read and only this rank's output is written, and a
// peer's next call cannot pass its start barrier before this rank's copies (ordered after this
// rank's barrier on ctx->stream) are done.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

struct Pads {
  uint32_t* p[KF_MAX_RANKS];
};

// Thread q signals peer q in slot `rank` of its pad and waits for peer q in slot q of this rank's
// pad. The epoch, this rank's call count, sits in its own pad past the W slots (zeroed before the
// first call), so back-to-back calls never see a stale flag.
__global__ void StartBarrier(Pads pads, int rank, int world) {
  uint32_t* own = pads.p[rank];
  const uint32_t epoch = own[world] + 1;
  const int q = threadIdx.x;
  if (q < world && q != rank) {
    kf_signal(pads.p[q] + rank, epoch);
    kf_wait(own + q, epoch);
  }
  __syncthreads();
  if (threadIdx.x == 0) own[world] = epoch;
}

}  // namespace

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  const kf_tensor& y = ctx->outputs[0];
  const int world = ctx->world_size, rank = ctx->rank;
  const int64_t a = static_cast<int64_t>(kf_param(ctx, "a", -1)),
                d = static_cast<int64_t>(kf_param(ctx, "d", -1));
  const int64_t batch = x.shape[0], row = x.shape[2] * static_cast<int64_t>(kf_dtype_size(x.dtype));
  int64_t off[KF_MAX_RANKS + 1] = {0};  // off[p]: rank p's first position in y
  for (int p = 0; p < world; ++p) off[p + 1] = off[p] + a + d * (world - 1 - p);
  // The formula must describe the tensors this rank was given.
  if (a < 0 || d < 0 || x.shape[1] != off[rank + 1] - off[rank] || y.shape[1] != off[world] ||
      ctx->signal_pad.nbytes < sizeof(uint32_t) * (world + 1))
    return 1;

  Pads pads = {};
  for (int q = 0; q < world; ++q) pads.p[q] = static_cast<uint32_t*>(ctx->signal_pad.peers[q]);
  StartBarrier<<<1, 32 * ((world + 31) / 32), 0, ctx->stream>>>(pads, rank, world);
  if (cudaGetLastError() != cudaSuccess) return 1;

  const size_t pitch = static_cast<size_t>(off[world] * row);  // one batch row of y, in bytes
  for (int k = 0; k < world; ++k) {
    const int p = (rank + k) % world;
    const size_t width = static_cast<size_t>((off[p + 1] - off[p]) * row);
    if (width == 0) continue;
    char* dst = static_cast<char*>(y.data) + off[p] * row;
    const void* src = x.peers[p];
    const cudaError_t err =
        batch == 1 ? cudaMemcpyAsync(dst, src, width, cudaMemcpyDeviceToDevice, ctx->stream)
                   : cudaMemcpy2DAsync(dst, pitch, src, width, width, static_cast<size_t>(batch),
                                       cudaMemcpyDeviceToDevice, ctx->stream);
    if (err != cudaSuccess) return 1;
  }
  return 0;
}
