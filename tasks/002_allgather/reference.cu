// All-gather baseline: one harness all-gather (NCCL when every rank has its own GPU).
#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  return kf_all_gather(ctx, x.data, y.data, static_cast<size_t>(x.numel), x.dtype);
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
