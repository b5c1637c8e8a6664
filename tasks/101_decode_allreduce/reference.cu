// Decode all-reduce baseline: one harness all-reduce (NCCL when every rank has
// its own GPU), as vLLM's pynccl communicator runs it when the custom
// all-reduce is off.
#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor* x = kf_input(ctx, "x");
  kf_tensor* y = kf_output(ctx, "y");
  if (x == nullptr || y == nullptr) return 1;
  return kf_all_reduce(ctx, x->data, y->data, static_cast<size_t>(x->numel), x->dtype, KF_SUM);
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
