// Deliberately wrong all-reduce: every rank returns its own input instead of
// the sum over ranks. The evaluator must reject it and say so.
#include <kforge/kernel.h>

extern "C" int kf_run(kf_ctx* ctx) {
  kf_tensor* x = kf_input(ctx, "x");
  kf_tensor* y = kf_output(ctx, "y");
  if (!x || !y) return 1;
  return cudaMemcpyAsync(y->data, x->data, x->nbytes, cudaMemcpyDeviceToDevice, ctx->stream) !=
         cudaSuccess;
}
