// The seccomp layer: an allowlist of system calls for every thread of a
// candidate process (libseccomp). The list is what the CUDA runtime and
// driver, the MPS client, NCCL's existing connections, glibc and a kernel's
// own host code need once the process is up; anything else is denied and, with
// user notification, reported to the coordinator as a sandbox violation.
#include <errno.h>
#include <fmt/format.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "sandbox/sandbox.h"

namespace kforge::sandbox {
namespace {

// Allowed without conditions. Files are Landlock's business (open/openat are
// here); sockets that exist may be used, new ones may not be made.
constexpr const char* kAllowed[] = {
    // memory
    "brk",
    "mmap",
    "munmap",
    "mremap",
    "mprotect",
    "madvise",
    "mlock",
    "munlock",
    "mincore",
    "msync",
    "membarrier",
    "memfd_create",
    // files and descriptors
    "read",
    "write",
    "readv",
    "writev",
    "pread64",
    "pwrite64",
    "preadv",
    "pwritev",
    "close",
    "close_range",
    "fstat",
    "newfstatat",
    "stat",
    "lstat",
    "statx",
    "lseek",
    "open",
    "openat",
    "openat2",
    "access",
    "faccessat",
    "faccessat2",
    "readlink",
    "readlinkat",
    "getcwd",
    "getdents64",
    "fcntl",
    "dup",
    "dup2",
    "dup3",
    "pipe",
    "pipe2",
    "eventfd2",
    "ftruncate",
    "fallocate",
    "statfs",
    "fstatfs",
    "ioctl",
    "flock",
    "fsync",
    "fdatasync",
    "unlink",
    "unlinkat",
    "mkdir",
    "mkdirat",
    "rename",
    "renameat",
    "renameat2",
    // waiting
    "poll",
    "ppoll",
    "select",
    "pselect6",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "futex",
    "futex_waitv",
    "nanosleep",
    "clock_nanosleep",
    "sched_yield",
    "restart_syscall",
    "timerfd_create",
    "timerfd_settime",
    "timerfd_gettime",
    // time, identity, limits (read only)
    "clock_gettime",
    "clock_getres",
    "gettimeofday",
    "time",
    "getpid",
    "getppid",
    "gettid",
    "getuid",
    "geteuid",
    "getgid",
    "getegid",
    "getgroups",
    "getresuid",
    "getresgid",
    "getpgrp",
    "getpgid",
    "getsid",
    "uname",
    "sysinfo",
    "getrlimit",
    "getrusage",
    "getrandom",
    "getcpu",
    "sched_getaffinity",
    "sched_setaffinity",
    "sched_getparam",
    "sched_getscheduler",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "getpriority",
    "capget",
    // threads and signals inside the process
    "set_robust_list",
    "get_robust_list",
    "set_tid_address",
    "rseq",
    "arch_prctl",
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "rt_sigpending",
    "rt_sigtimedwait",
    "rt_sigsuspend",
    "sigaltstack",
    "exit",
    "exit_group",
    // existing sockets (the channel, the MPS client, NCCL's connections)
    "sendmsg",
    "recvmsg",
    "sendto",
    "recvfrom",
    "sendmmsg",
    "recvmmsg",
    "getsockopt",
    "setsockopt",
    "getsockname",
    "getpeername",
    "shutdown",
    // shared memory segments (CUDA IPC, NCCL)
    "shmget",
    "shmat",
    "shmdt",
    "shmctl",
};

// With sockets allowed (NCCL's lazy connections on real GPUs): still no
// listening for outside connections beyond what NCCL does on loopback.
constexpr const char* kSocketCalls[] = {"socket", "connect", "bind", "listen", "accept", "accept4"};

Status Rule(scmp_filter_ctx ctx, uint32_t action, const char* name, unsigned n = 0,
            const scmp_arg_cmp* args = nullptr) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) return Status::Ok();  // not a syscall on this architecture
  int rc = seccomp_rule_add_array(ctx, action, nr, n, args);
  if (rc != 0)
    return Error(ErrorKind::kInternal,
                 fmt::format("seccomp rule {}: {}", name, std::strerror(-rc)));
  return Status::Ok();
}

Status AddRules(scmp_filter_ctx ctx, const Policy& policy) {
  for (const char* name : kAllowed) KF_RETURN_IF_ERROR(Rule(ctx, SCMP_ACT_ALLOW, name));
  if (policy.allow_sockets) {
    for (const char* name : kSocketCalls) KF_RETURN_IF_ERROR(Rule(ctx, SCMP_ACT_ALLOW, name));
  }
  const pid_t self = getpid();
  // Threads, never processes: clone must carry CLONE_THREAD. clone3 passes its
  // flags in memory seccomp cannot read, so it fails with ENOSYS and glibc
  // falls back to clone.
  scmp_arg_cmp thread = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD);
  KF_RETURN_IF_ERROR(Rule(ctx, SCMP_ACT_ALLOW, "clone", 1, &thread));
  KF_RETURN_IF_ERROR(Rule(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3"));
  // Signals only to this process (raise, abort, pthread_kill).
  scmp_arg_cmp to_self = SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(self));
  for (const char* name : {"kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"}) {
    KF_RETURN_IF_ERROR(Rule(ctx, SCMP_ACT_ALLOW, name, 1, &to_self));
  }
  scmp_arg_cmp zero = SCMP_A0(SCMP_CMP_EQ, 0);
  KF_RETURN_IF_ERROR(Rule(ctx, SCMP_ACT_ALLOW, "kill", 1, &zero));  // kill(0, sig): own group
  // Limits may be read, never raised: prlimit64(pid, res, NULL, old).
  scmp_arg_cmp no_new_limit = SCMP_A2(SCMP_CMP_EQ, 0);
  KF_RETURN_IF_ERROR(Rule(ctx, SCMP_ACT_ALLOW, "prlimit64", 1, &no_new_limit));
  // prctl: thread names and reading state; nothing that changes privileges.
  for (int option : {PR_SET_NAME, PR_GET_NAME, PR_GET_DUMPABLE, PR_GET_NO_NEW_PRIVS,
                     PR_CAPBSET_READ, PR_GET_TIMERSLACK, PR_SET_VMA}) {
    scmp_arg_cmp o = SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(option));
    KF_RETURN_IF_ERROR(Rule(ctx, SCMP_ACT_ALLOW, "prctl", 1, &o));
  }
  return Status::Ok();
}

}  // namespace

void ApplySeccomp(const Policy& policy, Report* report, int* listener) {
  *listener = -1;
  // API level 6: user notification together with thread synchronisation.
  const bool notify = seccomp_api_get() >= 6 && std::getenv("KFORGE_SANDBOX_NO_NOTIFY") == nullptr;
  scmp_filter_ctx ctx = seccomp_init(notify ? SCMP_ACT_NOTIFY : SCMP_ACT_KILL_PROCESS);
  if (ctx == nullptr) {
    report->Add("seccomp", false, "seccomp_init failed");
    return;
  }
  auto fail = [&](const std::string& why) {
    seccomp_release(ctx);
    report->Add("seccomp", false, why);
  };
  if (seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1) != 0)
    return fail("no thread synchronisation");
  if (seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1) != 0) return fail("cannot set no_new_privs");
  if (Status s = AddRules(ctx, policy); !s.ok()) return fail(s.message());
  int rc = seccomp_load(ctx);
  if (rc != 0) return fail(fmt::format("seccomp_load: {}", std::strerror(-rc)));
  if (notify) *listener = seccomp_notify_fd(ctx);
  seccomp_release(ctx);
  report->Add(
      "seccomp", true,
      fmt::format("allowlist of {} calls on every thread; denied calls {}", std::size(kAllowed),
                  notify ? "reported to the coordinator" : "kill the process (SIGSYS)"));
}

}  // namespace kforge::sandbox
