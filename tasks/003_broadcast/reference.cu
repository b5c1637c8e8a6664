// Broadcast baseline: one harness broadcast from the task's root.
#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  const int root = static_cast<int>(kf_param(ctx, "root", -1.0));
  if (root < 0 || root >= ctx->world_size) return 1;
  return kf_broadcast(ctx, x.data, y.data, static_cast<size_t>(x.numel), x.dtype, root);
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
