// Exploit: 001_allreduce forbids NCCL; use it anyway. Expected: policy_violation
// ("includes nccl.h: this task does not allow NCCL").
#include <nccl.h>

#include "kforge/kernel.h"

extern "C" int kf_run(kf_ctx* ctx) {
  ncclComm_t comm = nullptr;
  return ncclAllReduce(ctx->inputs[0].data, ctx->outputs[0].data, static_cast<size_t>(ctx->inputs[0].numel),
                       ncclBfloat16, ncclSum, comm, ctx->stream) == ncclSuccess
             ? 0
             : 1;
}
