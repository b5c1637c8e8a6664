// Exploit: open a pidfd on the parent and duplicate one of its descriptors
// (the coordinator's sockets and files) into this process. Expected:
// policy_violation ("calls pidfd_open").
#include <sys/types.h>
#include <unistd.h>

#include "kforge/kernel.h"

// glibc's own declarations (sys/pidfd.h, 2.36+), without its C++ linkage gap.
extern "C" int pidfd_open(pid_t pid, unsigned int flags);
extern "C" int pidfd_getfd(int pidfd, int targetfd, unsigned int flags);

extern "C" int kf_setup(kf_ctx*) {
  int pidfd = pidfd_open(getppid(), 0);
  if (pidfd >= 0) {
    int stolen = pidfd_getfd(pidfd, 3, 0);
    if (stolen >= 0) close(stolen);
    close(pidfd);
  }
  return 0;
}

extern "C" int kf_run(kf_ctx*) { return 0; }
