// Exploit: 001_allreduce forbids the harness collectives (the task is to write
// the all-reduce); call the harness's own one and claim its speed. Expected:
// policy_violation ("kf_all_reduce").
#include "kforge/kernel.h"

extern "C" int kf_run(kf_ctx* ctx) {
  return kf_all_reduce(ctx, ctx->inputs[0].data, ctx->outputs[0].data, static_cast<size_t>(ctx->inputs[0].numel),
                       ctx->inputs[0].dtype, KF_SUM);
}
