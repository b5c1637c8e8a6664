// Exploit: change NCCL's protocol and the CUDA launch mode through the
// environment the harness configured, to slow whatever the process does next.
// Expected: policy_violation ("calls setenv").
#include <stdlib.h>

#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) {
  setenv("NCCL_PROTO", "Simple", 1);
  setenv("CUDA_LAUNCH_BLOCKING", "1", 1);
  return 0;
}

extern "C" int kf_run(kf_ctx*) { return 0; }
