#include "kforge/core/subprocess.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kforge
