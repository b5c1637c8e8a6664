#include "kforge/core/subprocess.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

namespace kforge {
namespace {

TEST(SubprocessTest, CapturesOutputAndExitCode) {
  auto r = RealProcessRunner().Run({"sh", "-c", "echo out; echo err >&2; exit 3"}, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_FALSE(r->Succeeded());
}

TEST(SubprocessTest, KillsTheWholeGroupAtTheDeadline) {
  ProcessOptions opts;
  opts.timeout = std::chrono::milliseconds(300);
  // The grandchild holds stdout open; the group kill must end it too.
  auto r = RealProcessRunner().Run({"sh", "-c", "sleep 30 & sleep 30"}, opts);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_LT(r->seconds, 5.0);
}

TEST(SubprocessTest, MissingProgramIsNotFound) {
  auto r = RealProcessRunner().Run({"kforge-no-such-program-xyz"}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kNotFound);
}

TEST(SubprocessTest, PassesEnvironmentAndCwd) {
  ProcessOptions opts;
  opts.env["KFORGE_TEST_VAR"] = "hello";
  opts.cwd = "/";
  auto r = RealProcessRunner().Run({"sh", "-c", "echo $KFORGE_TEST_VAR; pwd"}, opts);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out, "hello\n/\n");
}

TEST(SubprocessTest, AChildThatInheritsNothingGetsOnlyItsOwnEnvironment) {
  setenv("KFORGE_TEST_PARENT_SECRET", "sk-parent", 1);
  ProcessOptions opts;
  opts.inherit_env = false;
  opts.env = {{"KFORGE_TEST_VAR", "own"}, {"PATH", "/usr/bin:/bin"}};
  auto r = RealProcessRunner().Run({"env"}, opts);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->out, "KFORGE_TEST_VAR=own\nPATH=/usr/bin:/bin\n");
  opts.inherit_env = true;
  auto inherited = RealProcessRunner().Run({"env"}, opts);
  ASSERT_TRUE(inherited.ok());
  EXPECT_NE(inherited->out.find("KFORGE_TEST_PARENT_SECRET=sk-parent"), std::string::npos);
  unsetenv("KFORGE_TEST_PARENT_SECRET");
}

// A descriptor another part of the process opened without O_CLOEXEC (an HTTP
// server's accepted connection is one) must not reach the child: a server
// killed mid-job would otherwise leave its client's connection open for as
// long as the child runs, and the client waiting on it.
TEST(SubprocessTest, TheChildInheritsNoDescriptorButItsStandardThree) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);  // no SOCK_CLOEXEC
  const int high = ::dup2(sv[0], 200);
  ASSERT_EQ(high, 200);
  auto r = RealProcessRunner().Run(
      {"sh", "-c",
       fmt::format("for f in {} {} 200; do test -e /proc/self/fd/$f && echo \"$f open\"; done; "
                   "echo done",
                   sv[0], sv[1])},
      {});
  ::close(sv[0]);
  ::close(sv[1]);
  ::close(high);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->out, "done\n");
}

// A child of a threaded process may only make async-signal-safe calls until
// it execs: a setenv in the child waits forever on the environment lock when
// another thread held it at the fork. Here another thread holds it most of
// the time; a runner that calls setenv after fork hangs within a few spawns.
TEST(SubprocessTest, SpawnsWhileAnotherThreadChangesTheEnvironment) {
  std::atomic<bool> stop{false};
  std::thread writer([&stop] {
    for (int i = 0; !stop.load(std::memory_order_relaxed); ++i)
      setenv("KFORGE_SPAWN_RACE", (i & 1) ? "odd-value-odd-value" : "even", 1);
  });
  auto spawns = std::async(std::launch::async, [] {
    int ok = 0;
    for (int i = 0; i < 200; ++i) {
      ProcessOptions opts;
      opts.env["KFORGE_CHILD_VAR"] = std::to_string(i);
      opts.timeout = std::chrono::seconds(20);
      auto r = RealProcessRunner().Run({"sh", "-c", "echo $KFORGE_CHILD_VAR"}, opts);
      if (r.ok() && r->out == std::to_string(i) + "\n") ++ok;
    }
    return ok;
  });
  if (spawns.wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
    // The child is stuck before exec; nothing can unblock it. Report and leave.
    std::fprintf(stderr, "spawning hung: a child blocked between fork and exec\n");
    std::fflush(stderr);
    _exit(1);
  }
  stop = true;
  writer.join();
  EXPECT_EQ(spawns.get(), 200);
}

}  // namespace
}  // namespace kforge
