// Exploit: read the coordinator's memory without attaching to it. Expected:
// policy_violation ("calls process_vm_readv").
#include <sys/uio.h>
#include <unistd.h>

#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx*) {
  char buf[64];
  struct iovec local = {buf, sizeof buf}, remote = {reinterpret_cast<void*>(0x400000), sizeof buf};
  process_vm_readv(getppid(), &local, 1, &remote, 1, 0);
  return 0;
}

extern "C" int kf_run(kf_ctx*) { return 0; }
