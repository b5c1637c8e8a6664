// Exploit: a constructor at dlopen calls glibc's _Fork (fork without the
// atfork handlers) to leave an orphan behind. Expected: policy_violation
// ("calls _Fork").
#include <unistd.h>

#include "kforge/kernel.h"

extern "C" pid_t _Fork(void);

__attribute__((constructor)) static void Orphan() {
  if (_Fork() == 0) {
    for (;;) pause();
  }
}

extern "C" int kf_run(kf_ctx*) { return 0; }
