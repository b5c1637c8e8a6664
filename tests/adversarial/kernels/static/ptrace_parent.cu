// Exploit: attach to the coordinator to read its memory (API keys) or rewrite
// its verdict. Expected: policy_violation ("calls ptrace").
#include <sys/ptrace.h>
#include <unistd.h>

#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) {
  ptrace(PTRACE_ATTACH, getppid(), nullptr, nullptr);
  return 0;
}

extern "C" int kf_run(kf_ctx*) { return 0; }
