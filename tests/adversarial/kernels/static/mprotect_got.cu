// Exploit: make the page holding the worker's GOT writable, to redirect its
// event-timing calls. Expected: policy_violation ("calls mprotect").
#include <stdint.h>
#include <sys/mman.h>

#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) {
  uintptr_t page = reinterpret_cast<uintptr_t>(&cudaEventElapsedTime) & ~uintptr_t{4095};
  mprotect(reinterpret_cast<void*>(page), 4096, PROT_READ | PROT_WRITE | PROT_EXEC);
  return 0;
}

extern "C" int kf_run(kf_ctx*) { return 0; }
