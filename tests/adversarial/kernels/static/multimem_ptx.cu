// Exploit: NVLink multicast through inline PTX (multimem.ld_reduce), which the
// test machines keep off because it can take a shared GPU out of service.
// Expected: policy_violation ("multimem").
#include <stdint.h>

#include "kforge/kernel.h"

__global__ void Reduce(const float* mc, float* out) {
  float v;
  asm volatile("multimem.ld_reduce.relaxed.sys.global.add.f32 %0, [%1];"
               : "=f"(v)
               : "l"(mc)
               : "memory");
  out[threadIdx.x] = v;
}

extern "C" int kf_run(kf_ctx* ctx) {
  Reduce<<<1, 32, 0, ctx->stream>>>(static_cast<const float*>(ctx->inputs[0].data),
                                    static_cast<float*>(ctx->outputs[0].data));
  return 0;
}
