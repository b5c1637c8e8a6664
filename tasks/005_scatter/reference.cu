// Scatter baseline: the root sends row p of its x to each rank p with grouped
// point-to-point calls (NCCL has no scatter) and copies its own row locally.
#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& x = ctx->inputs[0];
  kf_tensor& y = ctx->outputs[0];
  const int root = static_cast<int>(kf_param(ctx, "root", -1.0));
  if (root < 0 || root >= ctx->world_size) return 1;
  const size_t count = static_cast<size_t>(y.numel);
  const size_t row_bytes = count * kf_dtype_size(y.dtype);
  const char* xb = static_cast<const char*>(x.data);

  if (ctx->rank != root) {
    if (kf_group_start(ctx) != 0) return 1;
    const int rc = kf_recv(ctx, y.data, count, y.dtype, root);
    return kf_group_end(ctx) != 0 || rc != 0 ? 1 : 0;
  }
  if (kf_group_start(ctx) != 0) return 1;
  int rc = 0;
  for (int p = 0; p < ctx->world_size; ++p) {
    if (p != root && kf_send(ctx, xb + p * row_bytes, count, x.dtype, p) != 0) rc = 1;
  }
  if (kf_group_end(ctx) != 0 || rc != 0) return 1;
  return cudaMemcpyAsync(y.data, xb + root * row_bytes, row_bytes, cudaMemcpyDeviceToDevice,
                         ctx->stream) == cudaSuccess
             ? 0
             : 1;
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
