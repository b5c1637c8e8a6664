// The evaluation's canary in the rank groups (run/canary.h), with the fake
// worker: planted in the harness group's environment and a private 0600
// file, never in a candidate's environment whatever the coordinator holds,
// and found in a candidate's stdout/stderr when it writes it, across writes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "kforge/core/fs.h"
#include "kforge/evaluator/canary.h"
#include "protocol/mailbox.h"
#include "run/canary.h"
#include "run/worker_group.h"

namespace kforge::eval {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCanary = "kforge-canary-00112233445566778899aabbccddeeff";

GroupOptions Options(const std::string& role) {
  GroupOptions o;
  o.worker_path = KFORGE_FAKE_WORKER;
  o.role = role;
  o.world = 1;
  o.devices = {0};
  o.emulated = true;
  o.start_deadline_s = 10;
  o.env["KFORGE_WORKER_FAKE_0"] = "env";
  return o;
}

// A candidate group needs a mailbox per rank; `boxes` keeps them open.
GroupOptions CandidateOptions(std::vector<proto::Mailbox>* boxes) {
  GroupOptions o = Options("candidate");
  auto m = proto::Mailbox::Create();
  EXPECT_TRUE(m.ok());
  if (m.ok()) {
    o.mailbox_fds.push_back(m->fd());
    boxes->push_back(std::move(*m));
  }
  return o;
}

// Rank 0's environment entries, as the fake worker reports them.
std::vector<std::string> EnvironOf(WorkerGroup& g) {
  auto r = g.All({{"op", "ping"}}, 5, "test");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  return (*r)[0].body["environ"].get<std::vector<std::string>>();
}

bool Holds(const std::vector<std::string>& environ, const std::string& text) {
  return std::any_of(environ.begin(), environ.end(),
                     [&](const std::string& e) { return e.find(text) != std::string::npos; });
}

TEST(CanaryGroup, TheHarnessGroupHoldsItInItsEnvironmentAndAPrivateFile) {
  GroupOptions o = Options("harness");
  o.canary = kCanary;
  auto g = WorkerGroup::Start(o);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const auto environ = EnvironOf(**g);
  EXPECT_NE(std::find(environ.begin(), environ.end(), std::string(kEvalCanaryEnv) + "=" + kCanary),
            environ.end())
      << ::testing::PrintToString(environ);

  const fs::path file = (*g)->canary_file();
  ASSERT_FALSE(file.empty());
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0) << file;
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(stat(file.parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(file.parent_path().filename().string().rfind("kforge-harness-", 0), 0u) << file;
  auto held = ReadFile(file);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(*held, kCanary);

  g->reset();  // the group goes, and its file with it
  EXPECT_FALSE(fs::exists(file.parent_path())) << file;
}

TEST(CanaryGroup, WithoutACanaryNothingIsPlanted) {
  auto g = WorkerGroup::Start(Options("harness"));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE((*g)->canary_file().empty());
  const auto environ = EnvironOf(**g);
  EXPECT_FALSE(Holds(environ, kEvalCanaryEnv)) << ::testing::PrintToString(environ);
}

// However the canary reaches the coordinator (a red-team run sets
// KFORGE_REDTEAM_CANARY in kforge's own environment; an operator could set
// KFORGE_EVAL_CANARY) or the group's options, a candidate never gets it.
TEST(CanaryGroup, ACandidatesEnvironmentNeverHoldsIt) {
  setenv(kEvalCanaryEnv, kCanary, 1);
  setenv("KFORGE_REDTEAM_CANARY", kCanary, 1);
  std::vector<proto::Mailbox> boxes;
  GroupOptions o = CandidateOptions(&boxes);
  o.env[kEvalCanaryEnv] = kCanary;  // e.g. copied from a harness group's options
  auto g = WorkerGroup::Start(o);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const auto environ = EnvironOf(**g);
  EXPECT_FALSE(environ.empty());
  EXPECT_FALSE(Holds(environ, kCanary)) << ::testing::PrintToString(environ);
  EXPECT_FALSE(Holds(environ, "CANARY")) << ::testing::PrintToString(environ);
  EXPECT_FALSE(Holds(WorkerEnvironment(o), kCanary));
  unsetenv(kEvalCanaryEnv);
  unsetenv("KFORGE_REDTEAM_CANARY");

  // Asking for a candidate group that holds it is refused before any spawn.
  std::vector<proto::Mailbox> more;
  GroupOptions asked = CandidateOptions(&more);
  asked.canary = kCanary;
  auto refused = WorkerGroup::Start(asked);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().kind(), ErrorKind::kInvalidInput);
}

// A candidate that writes the canary to stderr, split over two writes, with
// output before it: found at its offset in the rank's whole output. Output
// written before the watch began is not searched.
TEST(CanaryGroup, ACandidatesOutputIsSearchedFromTheWatchOn) {
  std::vector<proto::Mailbox> boxes;
  GroupOptions o = CandidateOptions(&boxes);
  o.capture_output = true;
  o.env["KFORGE_WORKER_FAKE_0"] = "say";
  o.env["KFORGE_WORKER_FAKE_SAY"] = std::string("leaked:") + kCanary + "\n";
  auto g = WorkerGroup::Start(o);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_TRUE((*g)->All({{"op", "ping"}}, 5, "test").ok());  // before the watch
  usleep(100 * 1000);                                        // the drain has read it
  (*g)->WatchOutput(CanaryNeedles(kCanary));
  ASSERT_TRUE((*g)->All({{"op", "ping"}}, 5, "test").ok());
  (*g)->Kill();
  auto seen = (*g)->OutputSighting();
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->first, 0);
  const uint64_t said = std::string("leaked:").size() + std::string(kCanary).size() + 1;
  EXPECT_EQ(seen->second.offset, said + 7);  // the second saying's token
  EXPECT_FALSE(seen->second.raw);
  EXPECT_EQ(CanaryInStream(seen->first, seen->second).where,
            "rank 0's stdout/stderr at byte " + std::to_string(said + 7));
}

TEST(CanaryGroup, AnHonestCandidatesOutputHasNoSighting) {
  std::vector<proto::Mailbox> boxes;
  GroupOptions o = CandidateOptions(&boxes);
  o.capture_output = true;
  o.env["KFORGE_WORKER_FAKE_0"] = "say";
  o.env["KFORGE_WORKER_FAKE_SAY"] = "kforge-canary-but-not-this-one\n";
  auto g = WorkerGroup::Start(o);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  (*g)->WatchOutput(CanaryNeedles(kCanary));
  ASSERT_TRUE((*g)->All({{"op", "ping"}}, 5, "test").ok());
  (*g)->Kill();
  EXPECT_FALSE((*g)->OutputSighting().has_value());
  EXPECT_NE((*g)->CapturedOutput().dump().find("but-not-this-one"), std::string::npos);
}

// The MPS control daemon outlives evaluations as an ordinary process of
// this user: kforge's credentials and a red-team run's canary stay out of
// its environment; what the daemon needs (its directories, the loader's
// paths, the operator's other settings) is kept.
TEST(CanaryGroup, TheMpsDaemonGetsNoCredentialNorCanary) {
  setenv("OPENAI_API_KEY", "sk-test", 1);
  setenv("KFORGE_REDTEAM_CANARY", kCanary, 1);
  setenv("KFORGE_TEST_OPERATOR_SETTING", "1", 1);
  const auto env = MpsDaemonEnvironment({{"CUDA_MPS_PIPE_DIRECTORY", "/tmp/x/pipe"}});
  EXPECT_EQ(env.count("OPENAI_API_KEY"), 0u);
  EXPECT_EQ(env.count("KFORGE_REDTEAM_CANARY"), 0u);
  for (const auto& [k, v] : env) EXPECT_EQ(v.find(kCanary), std::string::npos) << k;
  EXPECT_EQ(env.at("CUDA_MPS_PIPE_DIRECTORY"), "/tmp/x/pipe");
  EXPECT_EQ(env.at("KFORGE_TEST_OPERATOR_SETTING"), "1");
  unsetenv("OPENAI_API_KEY");
  unsetenv("KFORGE_REDTEAM_CANARY");
  unsetenv("KFORGE_TEST_OPERATOR_SETTING");
}

}  // namespace
}  // namespace kforge::eval
