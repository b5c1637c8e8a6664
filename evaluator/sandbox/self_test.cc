#include "sandbox/self_test.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "protocol/channel.h"
#include "sandbox/supervisor.h"

namespace kforge::sandbox {
namespace {

// Raw system calls: what a kernel uses to get past the import-table check.
long RawSyscall(long n, long a = 0, long b = 0, long c = 0) {
  long ret;
  asm volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
  return ret;
}

long Opened(const std::string& path, int flags) {
  int fd = open(path.c_str(), flags);
  if (fd < 0) return -errno;
  close(fd);
  return fd;
}

// A System V segment the parent makes before the child confines itself: the
// child must not reach it (its own IPC namespace, or seccomp).
constexpr key_t kParentSegmentKey = 0x6b66720f;

// Files in /dev/shm: one the parent makes (out of the child's reach), one the
// child makes (gone with it).
std::string ShmFile(const char* who, pid_t parent) {
  return "/dev/shm/kforge-sandbox-" + std::string(who) + "-" + std::to_string(parent);
}

[[noreturn]] void Child(int fd, pid_t parent) {
  eval::Channel ch(fd);
  Report report;
  Policy policy = CandidatePolicy("/nonexistent-candidate-dir", "");
  ApplyEarlyLayers(policy, {fd}, &report);
  int listener = -1;
  ApplySeccomp(policy, &report, &listener);
  std::vector<int> fds;
  if (listener >= 0) fds.push_back(listener);
  if (!ch.Send({{"report", report.ToJson()}, {"listener", listener >= 0}}, fds).ok()) _exit(3);
  const std::string p = "/proc/" + std::to_string(parent);
  nlohmann::json r = nlohmann::json::array();
  auto note = [&](const char* what, long result) {
    r.push_back({{"what", what}, {"result", result}});
  };
  long forked = RawSyscall(SYS_fork);
  if (forked == 0) _exit(0);  // the copy, had it existed
  note("fork", forked);
  note("socket(AF_INET)", RawSyscall(SYS_socket, AF_INET, SOCK_STREAM, 0));
  note("kill(parent)", RawSyscall(SYS_kill, parent, 0));
  note("execve(/bin/sh)", RawSyscall(SYS_execve, reinterpret_cast<long>("/bin/sh"), 0, 0));
  note("open(parent mem, rw)", Opened(p + "/mem", O_RDWR));
  note("open(parent environ)", Opened(p + "/environ", O_RDONLY));
  // Its own memory through /proc/self. (/proc/self/task/<tid>/mem stays
  // writable: the CUDA driver needs write access under /proc/self/task. That
  // is no more than the code already running in this process can do, and
  // nothing this process holds is trusted: docs/integrity.md.)
  note("open(own mem, rw)", Opened("/proc/self/mem", O_RDWR));
  note("open(/tmp/x, create)", Opened("/tmp/kforge-sandbox-check", O_WRONLY | O_CREAT));
  note("shmget(the parent's System V segment)", RawSyscall(SYS_shmget, kParentSegmentKey, 0, 0));
  note("open(the parent's /dev/shm file)", Opened(ShmFile("parent", parent), O_RDONLY));
  if (int fd = open(ShmFile("child", parent).c_str(), O_WRONLY | O_CREAT, 0600); fd >= 0) close(fd);
  (void)ch.Send({{"attempts", r}});
  _exit(0);
}

}  // namespace

bool SelfTestResult::Passed() const {
  if (!report.Complete()) return false;
  if (!notify) return killed_by_sigsys;
  for (const Attempt& a : attempts) {
    if (!a.refused) return false;
  }
  return !attempts.empty();
}

nlohmann::json SelfTestResult::ToJson() const {
  nlohmann::json a = nlohmann::json::array();
  for (const Attempt& x : attempts)
    a.push_back({{"what", x.what}, {"result", x.result}, {"refused", x.refused}});
  return {
      {"passed", Passed()},   {"sandbox", report.ToJson()},           {"summary", report.Summary()},
      {"notify", notify},     {"killed_by_sigsys", killed_by_sigsys}, {"attempts", a},
      {"reported", reported}, {"shm_left_behind", shm_left_behind}};
}

Result<SelfTestResult> RunSelfTest() {
  KF_ASSIGN_OR_RETURN(auto pair, eval::MakeSocketPair());
  const pid_t parent = getpid();
  const int segment = shmget(kParentSegmentKey, 4096, IPC_CREAT | 0600);
  if (int fd = open(ShmFile("parent", parent).c_str(), O_WRONLY | O_CREAT, 0600); fd >= 0)
    close(fd);
  pid_t pid = fork();
  if (pid < 0) return Error(ErrorKind::kIo, "fork failed");
  if (pid == 0) {
    close(pair.first);
    Child(pair.second, parent);
  }
  close(pair.second);
  eval::Channel ch(pair.first);
  SelfTestResult out;
  auto hello = ch.Receive(std::chrono::seconds(20));
  if (!hello.ok()) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return hello.status().WithContext("the confined child");
  }
  out.report = Report::FromJson(hello->body.value("report", nlohmann::json::object()));
  out.notify = hello->body.value("listener", false) && hello->fds.size() == 1;
  Supervisor supervisor;
  if (out.notify) supervisor.Watch(0, pid, hello->fds[0]);
  auto results = ch.Receive(std::chrono::seconds(20));
  int status = 0;
  waitpid(pid, &status, 0);
  out.killed_by_sigsys = WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS;
  if (results.ok()) {
    for (const auto& a : results->body.value("attempts", nlohmann::json::array())) {
      Attempt x;
      x.what = a.value("what", "");
      x.result = a.value("result", 0L);
      x.refused = x.result < 0;
      out.attempts.push_back(std::move(x));
    }
  }
  for (const Violation& v : supervisor.Violations()) out.reported.push_back(v.syscall);
  out.shm_left_behind = unlink(ShmFile("child", parent).c_str()) == 0;
  unlink(ShmFile("parent", parent).c_str());
  unlink("/tmp/kforge-sandbox-check");
  if (segment >= 0) shmctl(segment, IPC_RMID, nullptr);
  return out;
}

}  // namespace kforge::sandbox
