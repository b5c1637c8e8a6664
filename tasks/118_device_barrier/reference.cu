// Device barrier baseline: the words gathered by one harness all-gather (NCCL's ncclAllGather
// of K int32 per rank on real GPUs), which is how a framework without a custom barrier
// synchronises ranks on the device.
#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor* token = kf_input(ctx, "token");
  kf_tensor* tokens = kf_output(ctx, "tokens");
  if (token == nullptr || tokens == nullptr) return 1;
  return kf_all_gather(ctx, token->data, tokens->data, static_cast<size_t>(token->numel),
                       token->dtype);
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
