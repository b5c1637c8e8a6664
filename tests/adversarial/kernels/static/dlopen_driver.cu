// Exploit: load the CUDA driver library directly and look up a forbidden
// function in it. Expected: policy_violation ("calls dlopen").
#include <dlfcn.h>

#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  return lib != nullptr ? 0 : 0;
}

extern "C" int kf_run(kf_ctx*) { return 0; }
