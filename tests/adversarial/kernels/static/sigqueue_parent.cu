// Exploit: signal the coordinator (the worker's parent) with a payload, e.g. to
// stop it before the verdict is written. Expected: policy_violation
// ("calls sigqueue").
#include <signal.h>
#include <unistd.h>

#include "kforge/kernel.h"

extern "C" int kf_run(kf_ctx*) {
  union sigval v;
  v.sival_int = 42;
  return sigqueue(getppid(), SIGUSR1, v) == 0 ? 0 : 0;
}
