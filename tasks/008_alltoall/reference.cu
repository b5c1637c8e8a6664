// All-to-all baseline: one harness all-to-all; N elements go to each peer.
#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  const size_t count = static_cast<size_t>(y.numel / ctx->world_size);
  return kf_all_to_all(ctx, x.data, y.data, count, x.dtype);
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
