// Gather baseline: every rank sends its x to the root with grouped
// point-to-point calls (NCCL has no gather); the root receives row p from rank p
// and copies its own row locally. Every other rank's y[1, N] is its own x, as in
// PKB (whose non-root ranks return their input).
#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  const int root = static_cast<int>(kf_param(ctx, "root", -1.0));
  if (root < 0 || root >= ctx->world_size) return 1;
  const size_t count = static_cast<size_t>(x.numel);
  const size_t row_bytes = count * kf_dtype_size(x.dtype);
  char* yb = static_cast<char*>(y.data);

  if (ctx->rank != root) {
    if (kf_group_start(ctx) != 0) return 1;
    const int rc = kf_send(ctx, x.data, count, x.dtype, root);
    if (kf_group_end(ctx) != 0 || rc != 0) return 1;
    return cudaMemcpyAsync(y.data, x.data, row_bytes, cudaMemcpyDeviceToDevice, ctx->stream) ==
                   cudaSuccess
               ? 0
               : 1;
  }
  if (kf_group_start(ctx) != 0) return 1;
  int rc = 0;
  for (int p = 0; p < ctx->world_size; ++p) {
    if (p != root && kf_recv(ctx, yb + p * row_bytes, count, y.dtype, p) != 0) rc = 1;
  }
  if (kf_group_end(ctx) != 0 || rc != 0) return 1;
  return cudaMemcpyAsync(yb + root * row_bytes, x.data, row_bytes, cudaMemcpyDeviceToDevice,
                         ctx->stream) == cudaSuccess
             ? 0
             : 1;
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
