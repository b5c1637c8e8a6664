// Exploit: wordexp() performs command substitution through /bin/sh, a shell
// without any exec in the kernel's own imports. Expected: policy_violation
// ("calls wordexp").
#include <wordexp.h>

#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) {
  wordexp_t w;
  if (wordexp("$(cat /proc/self/environ)", &w, 0) == 0) wordfree(&w);
  return 0;
}

extern "C" int kf_run(kf_ctx*) { return 0; }
