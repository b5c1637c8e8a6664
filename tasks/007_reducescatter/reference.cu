// Reduce-scatter baseline: one harness reduce-scatter (sum); y is rank r's chunk.
#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  return kf_reduce_scatter(ctx, x.data, y.data, static_cast<size_t>(y.numel), x.dtype, KF_SUM);
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
