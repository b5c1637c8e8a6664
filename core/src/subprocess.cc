#include "kforge/core/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "kforge/core/strings.h"

extern char** environ;

namespace kforge {
namespace {

using SteadyTime = std::chrono::steady_clock;

// The parent's environment (unless not `inherit`ed) with `overrides`
// replacing or adding variables, as NAME=VALUE strings for execve.
std::vector<std::string> MergedEnvironment(const std::map<std::string, std::string>& overrides,
                                           bool inherit) {
  std::vector<std::string> out;
  for (char** e = environ; inherit && e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    if (overrides.count(std::string(entry.substr(0, eq)))) continue;
    out.emplace_back(entry);
  }
  for (const auto& [k, v] : overrides) out.push_back(k + "=" + v);
  return out;
}

// `name` itself when it has a slash, else the first executable of that name
// in the colon-separated `path` (empty if none), as execvp would search.
std::filesystem::path FindInPathList(const std::string& name, const std::string& path) {
  if (name.find('/') != std::string::npos) return std::filesystem::path(name);
  for (const std::string& dir : Split(path.empty() ? "/usr/bin:/bin" : path, ':')) {
    std::filesystem::path candidate = std::filesystem::path(dir) / name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

void AppendCapped(std::string& dst, const char* data, size_t n, size_t cap) {
  if (dst.size() >= cap) return;
  dst.append(data, std::min(n, cap - dst.size()));
}

class PosixProcessRunner final : public ProcessRunner {
 public:
  Result<ProcessResult> Run(const std::vector<std::string>& argv,
                            const ProcessOptions& options) override {
    if (argv.empty()) return Error(ErrorKind::kInvalidInput, "empty command line");
    int out_pipe[2], err_pipe[2], exec_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0 ||
        pipe2(exec_pipe, O_CLOEXEC) != 0) {
      return Error(ErrorKind::kIo, std::string("pipe: ") + std::strerror(errno));
    }
    // Everything the child needs is built here, before the fork: in a
    // threaded process the child may only make async-signal-safe calls
    // (setenv can deadlock on a lock another thread held at the fork, and
    // execvp is not on the list). fork + execve rather than posix_spawn:
    // glibc's posix_spawn is refused with EPERM on our sandboxed GPU hosts.
    std::vector<std::string> env = MergedEnvironment(options.env, options.inherit_env);
    auto path_it = options.env.find("PATH");
    const char* parent_path = options.inherit_env ? std::getenv("PATH") : nullptr;
    const std::string search =
        path_it != options.env.end() ? path_it->second : (parent_path ? parent_path : "");
    const std::filesystem::path program = FindInPathList(argv[0], search);
    if (program.empty()) {
      for (int fd :
           {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], exec_pipe[0], exec_pipe[1]})
        close(fd);
      return Error(ErrorKind::kNotFound, argv[0] + ": " + std::strerror(ENOENT));
    }
    const std::string program_str = program.string();
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const char* cwd = options.cwd.empty() ? nullptr : options.cwd.c_str();
    const int nice = options.nice;

    auto start = SteadyTime::now();
    pid_t pid = fork();
    if (pid < 0) return Error(ErrorKind::kIo, std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      setpgid(0, 0);
      dup2(out_pipe[1], 1);
      dup2(err_pipe[1], 2);
      int devnull = open("/dev/null", O_RDONLY);
      if (devnull >= 0) dup2(devnull, 0);
      // Nothing else of ours goes with it. Descriptors another thread opened
      // without O_CLOEXEC (an HTTP server's accepted connections among them)
      // would otherwise outlive this process in the child: a server killed
      // mid-job would leave its clients' connections open for as long as
      // the compile it started runs, and the clients waiting on them.
      close_range(3, ~0U, 0);
      if (cwd != nullptr && chdir(cwd) != 0) _exit(127);
      if (nice > 0) (void)setpriority(PRIO_PROCESS, 0, nice);
      execve(program_str.c_str(), args.data(), envp.data());
      int err = errno;
      (void)!write(exec_pipe[1], &err, sizeof(err));
      _exit(127);
    }
    setpgid(pid, pid);  // also from the parent, to close the race with kill()
    close(out_pipe[1]);
    close(err_pipe[1]);
    close(exec_pipe[1]);

    int exec_errno = 0;
    ssize_t got = read(exec_pipe[0], &exec_errno, sizeof(exec_errno));
    close(exec_pipe[0]);
    if (got == sizeof(exec_errno)) {
      waitpid(pid, nullptr, 0);
      close(out_pipe[0]);
      close(err_pipe[0]);
      return Error(exec_errno == ENOENT ? ErrorKind::kNotFound : ErrorKind::kIo,
                   argv[0] + ": " + std::strerror(exec_errno));
    }

    ProcessResult result;
    auto deadline = start + options.timeout;
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    int open_fds = 2;
    char buf[65536];
    while (open_fds > 0) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyTime::now());
      if (left.count() <= 0) {
        result.timed_out = true;
        break;
      }
      int r = poll(fds, 2, static_cast<int>(std::min<long long>(left.count(), 1000)));
      if (r < 0 && errno != EINTR) break;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = read(fds[i].fd, buf, sizeof(buf));
        if (n <= 0) {
          close(fds[i].fd);
          fds[i].fd = -1;
          --open_fds;
        } else {
          AppendCapped(i == 0 ? result.out : result.err, buf, static_cast<size_t>(n),
                       options.max_output_bytes);
        }
      }
    }
    if (result.timed_out) kill(-pid, SIGKILL);
    for (auto& f : fds) {
      if (f.fd >= 0) close(f.fd);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
    if (result.timed_out) kill(-pid, SIGKILL);  // stragglers in the group
    result.seconds = std::chrono::duration<double>(SteadyTime::now() - start).count();
    return result;
  }
};

}  // namespace

ProcessRunner& RealProcessRunner() {
  static PosixProcessRunner runner;
  return runner;
}

std::filesystem::path FindInPath(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    return access(name.c_str(), X_OK) == 0 ? std::filesystem::path(name) : std::filesystem::path();
  }
  const char* path = std::getenv("PATH");
  return FindInPathList(name, path ? path : "");
}

}  // namespace kforge
