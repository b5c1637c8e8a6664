// Ulysses all_gather_into_tensor baseline, as VeOmni does it: one harness all-gather (NCCL's
// on real GPUs) of every rank's shard straight into y.
#include "kforge/kernel.h"

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  return kf_all_gather(ctx, x.data, y.data, static_cast<size_t>(x.numel), x.dtype);
}
