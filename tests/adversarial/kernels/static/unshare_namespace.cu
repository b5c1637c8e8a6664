// Exploit: a new user namespace gives the process every capability inside it,
// a step towards mounting over the sandbox's view. Expected: policy_violation
// ("calls unshare").
#include <sched.h>

#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) { return unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0 ? 0 : 0; }

extern "C" int kf_run(kf_ctx*) { return 0; }
