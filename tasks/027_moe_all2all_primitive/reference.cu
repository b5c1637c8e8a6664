// MoE dispatch baseline: one harness all-to-all of t * D elements per peer
// (NCCL's grouped send/recv on real GPUs, as all_to_all_single with equal
// splits is).
#include "kforge/kernel.h"

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  const size_t per_peer = static_cast<size_t>(y.numel / ctx->world_size);
  return kf_all_to_all(ctx, x.data, y.data, per_peer, x.dtype);
}
