// A child process for tests that are about process death: started with
// fork/exec, its stdout readable line by line, its stderr in a file, and
// signals sent to it by pid. Only processes this helper started are touched.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kforge::testing {

class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      Wait();
    }
    if (out_fd_ >= 0) ::close(out_fd_);
  }

  // Starts argv with `env` added to this process's environment; stderr goes
  // to `err_file`. False (with errno) when fork or the pipe fails.
  bool Start(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
             const std::filesystem::path& err_file) {
    // Everything the child needs is built before fork: between fork and exec
    // a threaded parent's child may only make async-signal-safe calls.
    std::map<std::string, std::string> merged;
    for (char** e = environ; *e; ++e) {
      const char* eq = std::strchr(*e, '=');
      if (eq) merged[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
    }
    for (const auto& [k, v] : env) merged[k] = v;
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp, args;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    int err = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int fds[2];
    if (err < 0 || ::pipe2(fds, O_CLOEXEC) != 0) return false;
    pid_ = ::fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      ::dup2(fds[1], 1);
      ::dup2(err, 2);
      ::execve(args[0], args.data(), envp.data());
      ::_exit(127);
    }
    ::close(err);
    ::close(fds[1]);
    out_fd_ = fds[0];
    return true;
  }

  // The next line of stdout, waiting up to `timeout`; nullopt on EOF or timeout.
  std::optional<std::string> ReadLine(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{out_fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::read(out_fd_, buf, sizeof buf);
      if (n <= 0) return std::nullopt;
      buffer_.append(buf, static_cast<size_t>(n));
    }
  }

  void Signal(int sig) {
    if (pid_ > 0 && !exited_) ::kill(pid_, sig);
  }

  // Waits for the exit; the wait(2) status.
  int Wait() {
    if (exited_) return status_;
    ::waitpid(pid_, &status_, 0);
    exited_ = true;
    return status_;
  }

  // Waits up to `timeout` for the exit; nullopt (and the child killed) when it
  // has not exited by then, so that a hang fails the test with what it knows
  // instead of running into ctest's timeout.
  std::optional<int> WaitFor(std::chrono::milliseconds timeout) {
    if (exited_) return status_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, &status_, WNOHANG) == pid_) {
        exited_ = true;
        return status_;
      }
      ::usleep(20000);
    }
    ::kill(pid_, SIGKILL);
    Wait();
    return std::nullopt;
  }

  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string buffer_;
  bool exited_ = false;
  int status_ = 0;
};

}  // namespace kforge::testing
