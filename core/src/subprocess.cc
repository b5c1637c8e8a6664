#include "kforge/core/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace kforge {
namespace {

using SteadyTime = std::chrono::steady_clock;

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
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);

    auto start = SteadyTime::now();
    pid_t pid = fork();
    if (pid < 0) return Error(ErrorKind::kIo, std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      setpgid(0, 0);
      dup2(out_pipe[1], 1);
      dup2(err_pipe[1], 2);
      int devnull = open("/dev/null", O_RDONLY);
      if (devnull >= 0) dup2(devnull, 0);
      if (!options.cwd.empty() && chdir(options.cwd.c_str()) != 0) _exit(127);
      for (const auto& [k, v] : options.env) setenv(k.c_str(), v.c_str(), 1);
      execvp(args[0], args.data());
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
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::filesystem::path candidate = std::filesystem::path(p.substr(start, end - start)) / name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

}  // namespace kforge
