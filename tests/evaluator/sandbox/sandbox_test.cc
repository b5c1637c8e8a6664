// The candidate sandbox without a GPU: a child process confines itself as a
// candidate worker does (early layers, then seccomp) and then tries what the
// exploit kernels try. Each attempt must fail, and with user notification the
// supervisor must name it.
#include "sandbox/sandbox.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
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

struct Attempts {
  nlohmann::json report;
  bool listener = false;
  long fork = 0, socket = 0, kill_parent = 0, mem_fd = 0, env_fd = 0;
};

// In the child: confine, send the report (and the listener), try each escape,
// send the results, exit.
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
  nlohmann::json r;
  r["fork"] = RawSyscall(SYS_fork);
  if (r["fork"] == 0) _exit(0);  // the copy, had it existed
  r["socket"] = RawSyscall(SYS_socket, AF_INET, SOCK_STREAM, 0);
  r["kill_parent"] = RawSyscall(SYS_kill, parent, 0);
  r["mem_fd"] =
      static_cast<long>(open(("/proc/" + std::to_string(parent) + "/mem").c_str(), O_RDWR));
  r["env_fd"] =
      static_cast<long>(open(("/proc/" + std::to_string(parent) + "/environ").c_str(), O_RDONLY));
  (void)ch.Send(r);
  _exit(0);
}

TEST(SandboxTest, AConfinedProcessCannotEscape) {
  auto pair = eval::MakeSocketPair();
  ASSERT_TRUE(pair.ok());
  const pid_t parent = getpid();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(pair->first);
    Child(pair->second, parent);
  }
  close(pair->second);
  eval::Channel ch(pair->first);
  auto hello = ch.Receive(std::chrono::seconds(20));
  ASSERT_TRUE(hello.ok()) << hello.status().ToString();
  Report report = Report::FromJson(hello->body["report"]);
  std::printf("%s\n", report.Summary().c_str());
  for (const Layer& l : report.layers)
    std::printf("  %-12s %s  %s\n", l.name.c_str(), l.applied ? "yes" : "NO ", l.detail.c_str());
  bool seccomp = false;
  for (const Layer& l : report.layers) seccomp = seccomp || (l.name == "seccomp" && l.applied);
  Supervisor supervisor;
  const bool notify = hello->body["listener"].get<bool>();
  if (notify) {
    ASSERT_EQ(hello->fds.size(), 1u);
    supervisor.Watch(0, pid, hello->fds[0]);
  }
  auto results = ch.Receive(std::chrono::seconds(20));
  int status = 0;
  waitpid(pid, &status, 0);
  if (!seccomp) GTEST_SKIP() << "this machine grants no seccomp filter: " << report.Summary();
  if (!notify) {
    // Without user notification the first forbidden call kills the process.
    ASSERT_TRUE(WIFSIGNALED(status)) << status;
    EXPECT_EQ(WTERMSIG(status), SIGSYS);
    return;
  }
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  const nlohmann::json& r = results->body;
  EXPECT_EQ(r["fork"].get<long>(), -EPERM);
  EXPECT_EQ(r["socket"].get<long>(), -EPERM);
  EXPECT_EQ(r["kill_parent"].get<long>(), -EPERM);
  EXPECT_LT(r["mem_fd"].get<long>(), 0) << "the parent's memory opened for writing";
  EXPECT_LT(r["env_fd"].get<long>(), 0) << "the parent's environment was readable";
  std::vector<std::string> names;
  for (const Violation& v : supervisor.Violations()) names.push_back(v.syscall);
  auto has = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  EXPECT_TRUE(has("fork")) << ::testing::PrintToString(names);
  EXPECT_TRUE(has("socket")) << ::testing::PrintToString(names);
  EXPECT_TRUE(has("kill")) << ::testing::PrintToString(names);
}

TEST(SandboxTest, SecretNamesAreRecognised) {
  for (const char* n : {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "HF_TOKEN",
                        "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "MY_PASSWORD"}) {
    EXPECT_TRUE(LooksSecret(n)) << n;
  }
  for (const char* n : {"CUDA_VISIBLE_DEVICES", "NCCL_DEBUG", "LD_LIBRARY_PATH"})
    EXPECT_FALSE(LooksSecret(n)) << n;
}

TEST(SandboxTest, ScrubbedEnvironmentKeepsOnlyWhatCudaNeeds) {
  setenv("OPENAI_API_KEY", "sk-x", 1);
  setenv("CUDA_VISIBLE_DEVICES", "0", 1);
  setenv("RANDOM_USER_SETTING", "1", 1);
  auto env = ScrubbedEnvironment({{"NCCL_NVLS_ENABLE", "0"}}, false);
  auto has = [&](const std::string& prefix) {
    return std::any_of(env.begin(), env.end(),
                       [&](const std::string& e) { return e.rfind(prefix, 0) == 0; });
  };
  EXPECT_FALSE(has("OPENAI_API_KEY="));
  EXPECT_FALSE(has("RANDOM_USER_SETTING="));
  EXPECT_TRUE(has("CUDA_VISIBLE_DEVICES=0"));
  EXPECT_TRUE(has("NCCL_NVLS_ENABLE=0"));
  unsetenv("OPENAI_API_KEY");
  unsetenv("RANDOM_USER_SETTING");
}

}  // namespace
}  // namespace kforge::sandbox
