// Exploit: install a signal handler that skips the harness's deadline (a
// SIGALRM that would end a hung call lands in the kernel instead). Expected:
// policy_violation ("calls sigaction").
#include <signal.h>
#include <string.h>

#include "kforge/kernel.h"

static void Ignore(int) {}

extern "C" int kf_setup(kf_ctx*) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = Ignore;
  sigaction(SIGALRM, &sa, nullptr);
  return 0;
}

extern "C" int kf_run(kf_ctx*) { return 0; }
