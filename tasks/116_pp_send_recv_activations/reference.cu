// Pipeline exchange baseline, as Megatron-LM's _batched_p2p_ops does it: one batch of
// isend/irecv (here kf_send/kf_recv inside one kf_group_start/kf_group_end, NCCL's grouped
// send/recv on real GPUs) with the next stage (send output_tensor, receive output_tensor_grad)
// and the previous one (send input_tensor_grad, receive input_tensor). The first and last stages
// have one neighbour.
#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor* y = kf_input(ctx, "output_tensor");
  const kf_tensor* dx = kf_input(ctx, "input_tensor_grad");
  kf_tensor* x = kf_output(ctx, "input_tensor");
  kf_tensor* dy = kf_output(ctx, "output_tensor_grad");
  if (y == nullptr || dx == nullptr || x == nullptr || dy == nullptr) return 1;
  const int rank = ctx->rank, world = ctx->world_size;
  int rc = kf_group_start(ctx);
  if (rc != 0) return rc;
  if (rank + 1 < world && y->numel > 0) {
    rc = rc != 0 ? rc : kf_send(ctx, y->data, static_cast<size_t>(y->numel), y->dtype, rank + 1);
    rc = rc != 0 ? rc : kf_recv(ctx, dy->data, static_cast<size_t>(dy->numel), dy->dtype, rank + 1);
  }
  if (rank > 0 && dx->numel > 0) {
    rc = rc != 0 ? rc : kf_send(ctx, dx->data, static_cast<size_t>(dx->numel), dx->dtype, rank - 1);
    rc = rc != 0 ? rc : kf_recv(ctx, x->data, static_cast<size_t>(x->numel), x->dtype, rank - 1);
  }
  const int end = kf_group_end(ctx);
  return rc != 0 ? rc : end;
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
