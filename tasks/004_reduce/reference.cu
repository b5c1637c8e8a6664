// Reduce baseline: one harness reduce (sum) to the task's root; every other rank
// copies its x to its y (the task checks non-root ranks hold their input).
#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  const int root = static_cast<int>(kf_param(ctx, "root", -1.0));
  if (root < 0 || root >= ctx->world_size) return 1;
  if (kf_reduce(ctx, x.data, y.data, static_cast<size_t>(x.numel), x.dtype, KF_SUM, root) != 0)
    return 1;
  if (ctx->rank == root) return 0;
  return cudaMemcpyAsync(y.data, x.data, x.nbytes, cudaMemcpyDeviceToDevice, ctx->stream) ==
                 cudaSuccess
             ? 0
             : 1;
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
