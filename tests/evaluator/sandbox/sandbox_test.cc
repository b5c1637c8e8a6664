// The candidate sandbox without a GPU: a child process confines itself as a
// candidate worker does (early layers, then seccomp) and then tries what the
// exploit kernels try. Each attempt must fail, and with user notification the
// supervisor must name it.
#include "sandbox/sandbox.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>

#include "sandbox/self_test.h"

namespace kforge::sandbox {
namespace {

TEST(SandboxTest, AConfinedProcessCannotEscape) {
  unsetenv("KFORGE_SANDBOX_PRIVATE_SHM");  // the default: a private /dev/shm
  auto r = RunSelfTest();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::printf("%s\n", r->ToJson().dump(1).c_str());
  bool seccomp = false, network = false, ipc = false, shm = false;
  for (const Layer& l : r->report.layers) {
    seccomp = seccomp || (l.name == "seccomp" && l.applied);
    network = network || (l.name == "network" && l.applied);
    ipc = ipc || (l.name == "ipc" && l.applied);
    shm = shm || (l.name == "shm" && l.applied);
  }
  // The IPC and mount namespaces take what the network namespace took (a
  // user namespace where there is no CAP_SYS_ADMIN): where one was granted,
  // so are the others.
  EXPECT_EQ(ipc, network) << r->report.Summary();
  EXPECT_EQ(shm, network) << r->report.Summary();
  // Under a private /dev/shm a file the child made there is gone with it.
  if (shm) {
    EXPECT_FALSE(r->shm_left_behind);
  }
  if (!seccomp) GTEST_SKIP() << "this machine grants no seccomp filter: " << r->report.Summary();
  if (!r->notify) {
    // Without user notification the first forbidden call kills the process.
    EXPECT_TRUE(r->killed_by_sigsys);
    return;
  }
  ASSERT_EQ(r->attempts.size(), 10u);
  for (const Attempt& a : r->attempts) EXPECT_TRUE(a.refused) << a.what << " returned " << a.result;
  EXPECT_EQ(r->attempts[0].result, -EPERM);  // fork: refused by seccomp, and reported
  auto has = [&](const std::string& n) {
    return std::find(r->reported.begin(), r->reported.end(), n) != r->reported.end();
  };
  for (const char* call : {"fork", "socket", "kill", "execve"}) {
    EXPECT_TRUE(has(call)) << call << " not reported: " << ::testing::PrintToString(r->reported);
  }
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

// A red-team run's canary, in kforge's own environment (the run's) or in
// the harness's (the evaluation's), is among what is scrubbed: it reaches a
// worker only where its spawner adds it (the harness group, run/worker_group.h).
TEST(SandboxTest, ScrubbedEnvironmentDropsTheCanaries) {
  const std::string canary = "kforge-canary-00112233445566778899aabbccddeeff";
  setenv("KFORGE_REDTEAM_CANARY", canary.c_str(), 1);
  setenv("KFORGE_EVAL_CANARY", canary.c_str(), 1);
  for (bool keep_path : {false, true}) {
    for (const std::string& e : ScrubbedEnvironment({}, keep_path))
      EXPECT_EQ(e.find(canary), std::string::npos) << e;
  }
  unsetenv("KFORGE_REDTEAM_CANARY");
  unsetenv("KFORGE_EVAL_CANARY");
}

}  // namespace
}  // namespace kforge::sandbox
