// kforge-jail: runs one untrusted tool (nvcc on a candidate's source) confined:
//   kforge-jail [--read DIR]... [--write DIR]... [--cpu-seconds N]
//               [--memory-bytes N] [--file-bytes N] -- PROGRAM ARGS...
// The program sees the system's programs and libraries (read-only), the few
// files under /etc, /proc and /sys that the toolchain opens, the given read
// directories, and can write only beneath the given write directories
// (Landlock); no TCP; a scrubbed environment (PATH kept, TMPDIR = the first
// write directory); no_new_privs; no inherited descriptors but 0-2. So a
// kernel's `#include "/etc/passwd"`, `#include "/proc/<pid>/cmdline"` or
// `.incbin "/home/me/.config/keys"` fails to open instead of being quoted in
// the diagnostics or embedded in the object, and nvcc cannot write outside
// its job's directory. The limits are rlimits (CPU time, address space,
// file size) inherited by every process the program starts, so that a kernel
// that makes a tool run forever, allocate without bound or write a 640 MiB
// object is stopped by the kernel (SIGXCPU, ENOMEM, SIGXFSZ); the compiler
// reads the tool's failure and names the limit (evaluator/compile).
// Exit status: the program's, or 125 when the jail itself failed.
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kforge/core/subprocess.h"
#include "sandbox/landlock.h"
#include "sandbox/sandbox.h"

namespace {

// What nvcc, its tools (cudafe++, cicc, ptxas, fatbinary, nvlink) and the
// host compiler open outside the system directories, found with strace on
// CUDA 12 and GCC 12: the loader's cache and configuration, the time zone,
// the kernel's overcommit policy, and CPU counts. Nothing else under /etc,
// /proc (another process's command line) or /sys is granted.
const std::vector<std::string> kSystemFiles = {
    "/etc/ld.so.cache",  "/etc/ld.so.conf",
    "/etc/ld.so.conf.d", "/etc/localtime",
    "/etc/alternatives", "/proc/sys/vm/overcommit_memory",
    "/proc/meminfo",     "/proc/cpuinfo",
    "/proc/stat",        "/sys/devices/system/cpu",
    "/dev/urandom",      "/dev/random",
    "/dev/zero"};

// The host compiler nvcc runs (gcc/g++ found in PATH) may live outside /usr
// (a devtoolset under /opt): its prefix's program, library and header
// directories are granted too, never the prefix itself (which may be a home).
void AddHostCompilerPrefix(std::vector<std::string>& read_paths) {
  for (const char* tool : {"g++", "gcc"}) {
    std::filesystem::path p = kforge::FindInPath(tool);
    std::error_code ec;
    if (p.empty()) continue;
    p = std::filesystem::canonical(p, ec);
    if (ec || p.parent_path().empty()) continue;
    const std::filesystem::path prefix = p.parent_path().parent_path();
    for (const char* sub : {"bin", "lib", "lib64", "libexec", "include"})
      read_paths.push_back((prefix / sub).string());
  }
}

// Soft limit `value`; for CPU time the hard limit is a few seconds later, so
// the tool gets SIGXCPU (and a message from nvcc) before SIGKILL.
bool SetLimit(int resource, const char* value, rlim_t hard_slack) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(value, &end, 10);
  if (end == value || *end != '\0' || v == 0) return false;
  struct rlimit l {};
  if (getrlimit(resource, &l) != 0) return false;
  rlim_t soft = static_cast<rlim_t>(v);
  rlim_t hard = soft + hard_slack;
  if (l.rlim_max != RLIM_INFINITY) {
    hard = std::min(hard, l.rlim_max);
    soft = std::min(soft, hard);
  }
  l.rlim_cur = soft;
  l.rlim_max = hard;
  return setrlimit(resource, &l) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  kforge::sandbox::LandlockRules rules;
  rules.read_paths = {"/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"};
  rules.read_paths.insert(rules.read_paths.end(), kSystemFiles.begin(), kSystemFiles.end());
  AddHostCompilerPrefix(rules.read_paths);
  rules.write_paths = {"/dev/null"};
  int i = 1;
  std::string tmpdir;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if ((a == "--read" || a == "--write") && i + 1 < argc) {
      std::string dir = argv[++i];
      if (a == "--read") {
        rules.read_paths.push_back(dir);
      } else {
        if (tmpdir.empty()) tmpdir = dir;
        rules.write_paths.push_back(dir);
      }
      continue;
    }
    if ((a == "--cpu-seconds" || a == "--memory-bytes" || a == "--file-bytes") && i + 1 < argc) {
      const char* value = argv[++i];
      const bool set = a == "--cpu-seconds"    ? SetLimit(RLIMIT_CPU, value, 5)
                       : a == "--memory-bytes" ? SetLimit(RLIMIT_AS, value, 0)
                                               : SetLimit(RLIMIT_FSIZE, value, 0);
      if (!set) {
        std::fprintf(stderr, "kforge-jail: cannot set %s %s: %s\n", a.c_str(), value,
                     std::strerror(errno));
        return 125;
      }
      continue;
    }
    std::fprintf(stderr,
                 "kforge-jail: unknown argument %s\nusage: kforge-jail [--read DIR]... [--write "
                 "DIR]... [--cpu-seconds N] [--memory-bytes N] [--file-bytes N] -- PROGRAM "
                 "ARGS...\n",
                 argv[i]);
    return 125;
  }
  if (i >= argc) {
    std::fprintf(stderr, "kforge-jail: no program given after --\n");
    return 125;
  }
  close_range(3, ~0u, 0);
  std::map<std::string, std::string> extra;
  if (!tmpdir.empty()) extra["TMPDIR"] = tmpdir;
  std::vector<std::string> env = kforge::sandbox::ScrubbedEnvironment(extra, /*keep_path=*/true);
  kforge::sandbox::Layer l = kforge::sandbox::ApplyLandlock(rules);
  if (!l.applied) {
    // A kernel without Landlock still gets the scrubbed environment; say so.
    std::fprintf(stderr, "kforge-jail: warning: %s\n", l.detail.c_str());
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    std::fprintf(stderr, "kforge-jail: no_new_privs: %s\n", std::strerror(errno));
    return 125;
  }
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  execvpe(argv[i], argv + i, envp.data());
  std::fprintf(stderr, "kforge-jail: cannot run %s: %s\n", argv[i], std::strerror(errno));
  return 125;
}
