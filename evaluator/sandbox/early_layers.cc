// The layers a confined process applies to itself before any other thread
// exists: environment check, descriptors, network namespace, privileges,
// limits and Landlock (sandbox.h).
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "kforge/core/strings.h"
#include "sandbox/landlock.h"
#include "sandbox/sandbox.h"

extern char** environ;

namespace kforge::sandbox {
namespace {

std::string_view EnvOrEmpty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

Layer CheckEnvironment() {
  std::vector<std::string> secret;
  int n = 0;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e, ++n) {
    std::string kv(*e);
    std::string name = kv.substr(0, kv.find('='));
    if (LooksSecret(name)) secret.push_back(name);
  }
  for (const std::string& name : secret) unsetenv(name.c_str());
  if (!secret.empty()) {
    return {"environment", false,
            fmt::format("inherited {} (now unset): the spawner did not scrub",
                        fmt::join(secret, ", "))};
  }
  return {"environment", true, fmt::format("{} variables, none secret", n)};
}

Layer CloseDescriptors(const std::vector<int>& keep) {
  // Everything but 0-2 and `keep` goes: whatever a careless parent leaked.
  std::vector<int> open_fds;
  if (DIR* d = opendir("/proc/self/fd")) {
    int self = dirfd(d);
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      int fd = std::atoi(e->d_name);
      if (fd > 2 && fd != self && std::find(keep.begin(), keep.end(), fd) == keep.end()) {
        open_fds.push_back(fd);
      }
    }
    closedir(d);
  } else {
    return {"descriptors", false,
            std::string("cannot list /proc/self/fd: ") + std::strerror(errno)};
  }
  for (int fd : open_fds) close(fd);
  return {
      "descriptors", true,
      fmt::format("kept {} channel descriptors; closed {} others", keep.size(), open_fds.size())};
}

// unshare(what); without CAP_SYS_ADMIN, in a fresh user namespace, which
// brings the right to make the others. Our own ids are mapped into it so that
// files, devices and the MPS daemon still see us. Returns 0 or the errno of
// the first attempt; *in_userns says whether a user namespace was made.
int UnshareMaybeInUserNamespace(int what, bool* in_userns, bool* mapped) {
  *in_userns = false;
  if (unshare(what) == 0) return 0;
  const int err = errno;
  const uid_t uid = getuid();
  const gid_t gid = getgid();
  if (unshare(CLONE_NEWUSER | what) != 0) return err;
  auto write = [](const char* path, const std::string& text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return false;
    bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    close(fd);
    return ok;
  };
  *in_userns = true;
  *mapped = write("/proc/self/setgroups", "deny") &&
            write("/proc/self/uid_map", fmt::format("{} {} 1", uid, uid)) &&
            write("/proc/self/gid_map", fmt::format("{} {} 1", gid, gid));
  return 0;
}

Layer PrivateNetwork(bool want) {
  if (!want) return {"network", false, "shared network namespace (NCCL needs the host's loopback)"};
  bool userns = false, mapped = false;
  if (int err = UnshareMaybeInUserNamespace(CLONE_NEWNET, &userns, &mapped); err != 0)
    return {"network", false, fmt::format("unshare(CLONE_NEWNET): {}", std::strerror(err))};
  if (!userns) return {"network", true, "private network namespace"};
  return {"network", true,
          std::string("private network namespace (in a user namespace") +
              (mapped ? ")" : "; ids unmapped)")};
}

// System V shared memory, semaphores and message queues, and POSIX message
// queues, of this process alone: whatever a candidate creates there vanishes
// with its group, and nothing another process made is reachable. (POSIX
// shared memory lives in /dev/shm, a file system: see docs/integrity.md.)
Layer PrivateIpc() {
  bool userns = false, mapped = false;
  if (int err = UnshareMaybeInUserNamespace(CLONE_NEWIPC, &userns, &mapped); err != 0)
    return {"ipc", false, fmt::format("unshare(CLONE_NEWIPC): {}", std::strerror(err))};
  return {
      "ipc", true,
      std::string("private IPC namespace (System V objects, POSIX message queues)") +
          (userns ? (mapped ? " in a user namespace" : " in a user namespace; ids unmapped") : "")};
}

// POSIX shared memory of this process alone: a fresh tmpfs on /dev/shm in a
// private mount namespace. Files a candidate leaves there vanish with its
// process, and it sees none of another process's (CUDA and MPS keep nothing
// there that a client must share; NCCL's shared-memory transport between
// ranks does, so a candidate with NCCL keeps the host's).
Layer PrivateShm(bool want, uint64_t bytes) {
  if (!want) {
    return {"shm", false,
            "the host's /dev/shm (KFORGE_SANDBOX_PRIVATE_SHM=0, or a candidate with NCCL, whose "
            "shared-memory transport needs the host's)"};
  }
  bool userns = false, mapped = false;
  if (int err = UnshareMaybeInUserNamespace(CLONE_NEWNS, &userns, &mapped); err != 0)
    return {"shm", false, fmt::format("unshare(CLONE_NEWNS): {}", std::strerror(err))};
  // Nothing mounted here may reach the host's namespace, nor the reverse.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return {"shm", false, fmt::format("making mounts private: {}", std::strerror(errno))};
  const std::string options = fmt::format("size={},mode=1777", bytes);
  if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options.c_str()) != 0)
    return {"shm", false, fmt::format("mounting a tmpfs on /dev/shm: {}", std::strerror(errno))};
  return {"shm", true,
          fmt::format("private /dev/shm (a {} MiB tmpfs in its own mount namespace)", bytes >> 20)};
}

Layer DropPrivileges() {
  std::vector<std::string> failed;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) failed.push_back("no_new_privs");
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) failed.push_back("dumpable");
  // Every capability out of the bounding, ambient, effective, permitted and
  // inheritable sets: a uid-0 worker keeps root's files only where Landlock
  // allows and cannot ptrace, signal or read other processes.
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  for (int cap = 0; cap <= 63; ++cap) {
    if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  }
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capset, &hdr, data) != 0) failed.push_back("capset");
  if (!failed.empty())
    return {"privileges", false, fmt::format("failed: {}", fmt::join(failed, ", "))};
  return {"privileges", true, "no_new_privs, no capabilities, not dumpable"};
}

Layer SetLimits(const Policy& p) {
  std::vector<std::string> failed;
  auto set = [&](int res, rlim_t v, const char* name) {
    rlimit cur{};
    getrlimit(res, &cur);
    rlimit lim{std::min<rlim_t>(v, cur.rlim_max), std::min<rlim_t>(v, cur.rlim_max)};
    if (setrlimit(res, &lim) != 0) failed.push_back(name);
  };
  set(RLIMIT_CORE, 0, "core");
  set(RLIMIT_FSIZE, p.file_bytes, "fsize");
  set(RLIMIT_CPU, p.cpu_seconds, "cpu");
  if (!failed.empty())
    return {"limits", false, fmt::format("setrlimit failed: {}", fmt::join(failed, ", "))};
  // No RLIMIT_AS: the CUDA driver reserves the GPUs' unified address space.
  return {"limits", true,
          fmt::format("no core dumps, files <= {} MiB, CPU <= {} s (no address-space limit: CUDA "
                      "reserves the GPUs' unified address space)",
                      p.file_bytes >> 20, p.cpu_seconds)};
}

}  // namespace

Policy CandidatePolicy(const std::string& candidate_dir, const std::string& mps_dir) {
  Policy p;
  p.read_paths = {"/usr",
                  "/lib",
                  "/lib64",
                  "/lib32",
                  "/opt",
                  "/etc/ld.so.cache",
                  "/etc/ld.so.conf",
                  "/etc/ld.so.conf.d",
                  "/etc/nsswitch.conf",
                  "/etc/localtime",
                  "/proc",
                  "/sys",
                  "/dev/urandom",
                  "/dev/random",
                  "/dev/zero",
                  "/run/nvidia-persistenced",
                  candidate_dir};
  for (const std::string& d : Split(EnvOrEmpty("LD_LIBRARY_PATH"), ':')) p.read_paths.push_back(d);
  if (const char* home = std::getenv("CUDA_HOME")) p.read_paths.push_back(home);
  p.read_paths.push_back("/usr/local/cuda");
  // Opening a GPU device node for ioctl needs write access; NCCL and CUDA IPC
  // use /dev/shm. The MPS client talks through sockets in its directory,
  // which needs no write access (connecting is not a file write): the
  // directory is read-only, so a candidate can neither write the control
  // daemon's pipe nor plant files beside its sockets.
  p.write_paths = {"/dev/null", "/dev/shm"};
  if (DIR* d = opendir("/dev")) {
    while (dirent* e = readdir(d)) {
      if (std::strncmp(e->d_name, "nvidia", 6) == 0)
        p.write_paths.push_back(std::string("/dev/") + e->d_name);
    }
    closedir(d);
  }
  p.write_paths.push_back("/dev/dri");
  // The CUDA driver writes under its own process's /proc entry at
  // initialisation (measured on an H200 host: with no write access there,
  // cudaSetDevice fails with cudaErrorOperatingSystem). The grant is for this
  // process's own threads only; other processes' entries stay read-only.
  p.write_paths.push_back("/proc/self/task");
  // Operator knobs for a machine whose driver lives elsewhere (colon lists).
  for (const std::string& d : Split(EnvOrEmpty("KFORGE_SANDBOX_EXTRA_READ"), ':'))
    p.read_paths.push_back(d);
  for (const std::string& d : Split(EnvOrEmpty("KFORGE_SANDBOX_EXTRA_WRITE"), ':'))
    p.write_paths.push_back(d);
  if (!mps_dir.empty()) p.read_paths.push_back(mps_dir);
  // Measured under MPS on an H100: a client in its own mount namespace with a
  // fresh tmpfs on /dev/shm reaches the daemon and runs (the daemon keeps
  // nothing there). KFORGE_SANDBOX_PRIVATE_SHM=0 keeps the host's.
  p.private_shm = EnvOrEmpty("KFORGE_SANDBOX_PRIVATE_SHM") != "0";
  return p;
}

// KFORGE_SANDBOX_SKIP=network,landlock,... leaves layers out (to find out
// which one a machine's driver cannot live with); the report then says the
// sandbox is partial, and such runs stay off leaderboards.
bool LayerSkipped(const char* layer) {
  const char* skip = std::getenv("KFORGE_SANDBOX_SKIP");
  if (skip == nullptr) return false;
  for (const std::string& s : Split(skip, ',')) {
    if (s == layer) return true;
  }
  return false;
}

void ApplyEarlyLayers(const Policy& policy, const std::vector<int>& keep_fds, Report* report) {
  auto skipped = [&](const char* name) {
    if (!LayerSkipped(name)) return false;
    report->Add(name, false, "left out by KFORGE_SANDBOX_SKIP");
    return true;
  };
  report->layers.push_back(CheckEnvironment());
  if (!skipped("descriptors")) report->layers.push_back(CloseDescriptors(keep_fds));
  if (!skipped("network")) report->layers.push_back(PrivateNetwork(policy.private_network));
  if (!skipped("ipc")) report->layers.push_back(PrivateIpc());
  if (!skipped("shm")) report->layers.push_back(PrivateShm(policy.private_shm, policy.shm_bytes));
  if (!skipped("limits")) report->layers.push_back(SetLimits(policy));
  // Landlock before dropping capabilities: reading the paths needs none, but
  // the order keeps no_new_privs set either way.
  LandlockRules rules;
  rules.read_paths = policy.read_paths;
  rules.write_paths = policy.write_paths;
  rules.allow_tcp = policy.allow_tcp;
  rules.allow_abstract_unix = policy.allow_sockets;
  Layer landlock = LayerSkipped("landlock")
                       ? Layer{"landlock", false, "left out by KFORGE_SANDBOX_SKIP"}
                       : ApplyLandlock(rules);
  if (!skipped("privileges")) report->layers.push_back(DropPrivileges());
  report->layers.push_back(std::move(landlock));
}

}  // namespace kforge::sandbox
