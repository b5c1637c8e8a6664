// Exploit: kf_run returns at once and a host thread does the work afterwards,
// outside the timed interval (the 45x false speedup of the held-out suite).
// Expected: policy_violation ("calls pthread_create").
#include <pthread.h>

#include "kforge/kernel.h"

static void* Later(void* arg) {
  kf_ctx* ctx = static_cast<kf_ctx*>(arg);
  cudaMemcpyAsync(ctx->outputs[0].data, ctx->inputs[0].data, ctx->outputs[0].nbytes,
                  cudaMemcpyDeviceToDevice, ctx->stream);
  return nullptr;
}

extern "C" int kf_run(kf_ctx* ctx) {
  pthread_t t;
  if (pthread_create(&t, nullptr, Later, ctx) != 0) return 1;
  pthread_detach(t);
  return 0;
}
