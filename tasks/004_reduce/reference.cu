// Reduce baseline: one harness reduce (sum) to the task's root. Like NCCL, the
// other ranks' y is left as it was (it is not checked).
#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  const int root = static_cast<int>(kf_param(ctx, "root", -1.0));
  if (root < 0 || root >= ctx->world_size) return 1;
  return kf_reduce(ctx, x.data, y.data, static_cast<size_t>(x.numel), x.dtype, KF_SUM, root);
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
