// `kforge run --rejudge RUN` end to end: a recorded run judged again by this
// machine's evaluator into a new run, with no model reachable.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_fixture.h"
#include "kforge/results/store.h"

namespace kforge {
namespace {

namespace fs = std::filesystem;

struct TurnKernels {
  std::vector<std::string> kernels, replies;
  int evaluations = 0;
};

TurnKernels ReadRun(const fs::path& dir) {
  TurnKernels out;
  auto store = results::RunStore::Open(dir, true);
  EXPECT_TRUE(store.ok()) << dir;
  if (!store.ok()) return out;
  auto runs = (*store)->ListRuns();
  EXPECT_TRUE(runs.ok() && runs->size() == 1u) << dir;
  if (!runs.ok() || runs->empty()) return out;
  auto sessions = (*store)->ListSessions(runs->front().id);
  EXPECT_TRUE(sessions.ok());
  if (!sessions.ok()) return out;
  for (const auto& s : *sessions) {
    auto turns = (*store)->ListTurns(s.id);
    auto evals = (*store)->ListEvaluations(s.id);
    EXPECT_TRUE(turns.ok() && evals.ok());
    if (!turns.ok() || !evals.ok()) return out;
    for (const auto& t : *turns) {
      out.kernels.push_back(t.kernel_sha);
      out.replies.push_back(t.reply);
    }
    out.evaluations += static_cast<int>(evals->size());
  }
  return out;
}

// The stored config of the one run in `dir`.
nlohmann::json StoredConfig(const fs::path& dir) {
  auto store = results::RunStore::Open(dir, true);
  EXPECT_TRUE(store.ok()) << dir;
  if (!store.ok()) return nullptr;
  auto runs = (*store)->ListRuns();
  EXPECT_TRUE(runs.ok() && runs->size() == 1u) << dir;
  if (!runs.ok() || runs->empty()) return nullptr;
  return runs->front().config;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_F(CliTest, RejudgeEvaluatesARecordedRunAgainWithoutAModel) {
  const fs::path runs = tmp_ / "runs";
  // The cassette is gone before the rejudge: no model can be reached.
  const fs::path cassette = tmp_ / "cassette.jsonl";
  fs::copy_file(kRoot / "examples/demo/cassette.jsonl", cassette);
  auto made = Kforge({"run", "--models", "replay:" + cassette.string(), "--tasks", "1", "--name",
                      "orig", "--out", runs.string(), "--compile-only"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  fs::remove(cassette);
  const TurnKernels before = ReadRun(runs / "orig");
  ASSERT_EQ(before.kernels.size(), 2u);
  auto board_before = Kforge({"leaderboard", (runs / "orig").string(), "--format", "json"});
  ASSERT_EQ(board_before.exit_code, 0) << board_before.err;

  auto re =
      Kforge({"run", "--rejudge", "orig", "--out", runs.string(), "--compile-only", "--json", "-"});
  ASSERT_EQ(re.exit_code, 0) << re.err;
  const auto doc = nlohmann::json::parse(re.out);
  EXPECT_EQ(doc["name"], "orig-rejudge-1");
  EXPECT_EQ(doc["rejudge_of"]["run"], "orig");
  // One line per kernel judged: the evaluator saw each of them.
  EXPECT_EQ(Count(re.err, "001_allreduce turn 1: compile_error"), 1) << re.err;
  EXPECT_EQ(Count(re.err, "001_allreduce turn 2: compiled"), 1) << re.err;
  EXPECT_NE(re.err.find("no model called"), std::string::npos) << re.err;

  const TurnKernels after = ReadRun(runs / "orig-rejudge-1");
  EXPECT_EQ(after.kernels, before.kernels);
  EXPECT_EQ(after.replies, before.replies);
  EXPECT_EQ(after.evaluations, before.evaluations) << "the compile error, judged again";
  // The original is untouched.
  EXPECT_EQ(ReadRun(runs / "orig").evaluations, before.evaluations);
  auto board_after = Kforge({"leaderboard", (runs / "orig").string(), "--format", "json"});
  EXPECT_EQ(board_after.out, board_before.out);

  // Beside each other on the leaderboard and in a comparison.
  auto both = Kforge({"leaderboard", (runs / "orig").string(), (runs / "orig-rejudge-1").string(),
                      "--by", "run", "--format", "csv"});
  ASSERT_EQ(both.exit_code, 0) << both.err;
  EXPECT_NE(both.out.find("orig-rejudge-1"), std::string::npos) << both.out;
  auto cmp = Kforge({"compare", (runs / "orig").string(), (runs / "orig-rejudge-1").string()});
  EXPECT_EQ(cmp.exit_code, 0) << cmp.err;

  // A second rejudge takes the next name; a missing run is named.
  auto second = Kforge({"run", "--rejudge", "orig", "--out", runs.string(), "--compile-only"});
  EXPECT_EQ(second.exit_code, 0) << second.err;
  EXPECT_TRUE(fs::exists(runs / "orig-rejudge-2"));
  auto missing = Kforge({"run", "--rejudge", "nosuchrun", "--out", runs.string()});
  EXPECT_EQ(missing.exit_code, 66) << missing.err;
  EXPECT_NE(missing.err.find("no run 'nosuchrun' to rejudge"), std::string::npos) << missing.err;
  auto model = Kforge({"run", "--rejudge", "orig", "--out", runs.string(), "--models", "x:y"});
  EXPECT_EQ(model.exit_code, 64) << model.err;
  EXPECT_NE(model.err.find("no sessions of model 'x:y'"), std::string::npos) << model.err;
  auto asks = Kforge({"run", "--rejudge", "orig", "--out", runs.string(), "--turns", "3"});
  EXPECT_EQ(asks.exit_code, 64) << asks.err;
  EXPECT_NE(asks.err.find("--turns would not apply"), std::string::npos) << asks.err;
}

// `--profile` on a run and on a rejudge: taken (not among the flags a
// rejudge refuses) and stored with the new run's config; a rejudge without
// it does not inherit the original's, and a resume of one with it keeps
// profiling. (Without a GPU nothing is profiled: the documents' profiles
// are RunnerProfile.* and Rejudge.* in agent_test.)
TEST_F(CliTest, ARunAndARejudgeTakeProfileAndStoreIt) {
  const fs::path runs = tmp_ / "runs";
  const std::string cassette = (kRoot / "examples/demo/cassette.jsonl").string();
  auto made = Kforge({"run", "--models", "replay:" + cassette, "--tasks", "1", "--name", "orig",
                      "--out", runs.string(), "--compile-only", "--profile"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_EQ(StoredConfig(runs / "orig").value("profile", false), true);
  auto plain = Kforge({"run", "--rejudge", "orig", "--out", runs.string(), "--compile-only"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  // A rejudge profiles only when asked: the original's flag is not read.
  const std::string profiles = "every GPU evaluation profiles its kernel (--profile)";
  EXPECT_EQ(StoredConfig(runs / "orig-rejudge-1").value("profile", true), false);
  EXPECT_EQ(plain.err.find(profiles), std::string::npos) << plain.err;
  auto re =
      Kforge({"run", "--rejudge", "orig", "--out", runs.string(), "--compile-only", "--profile"});
  ASSERT_EQ(re.exit_code, 0) << re.err;
  EXPECT_EQ(re.err.find("would not apply"), std::string::npos) << re.err;
  EXPECT_EQ(StoredConfig(runs / "orig-rejudge-2").value("profile", false), true);
  EXPECT_NE(re.err.find(profiles), std::string::npos) << re.err;
  auto resumed = Kforge({"run", "--resume", "orig-rejudge-2", "--out", runs.string(),
                         "--compile-only", "--json", "-"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resuming the rejudge of"), std::string::npos) << resumed.err;
  EXPECT_NE(resumed.err.find(profiles), std::string::npos) << resumed.err;
  EXPECT_EQ(StoredConfig(runs / "orig-rejudge-2").value("profile", false), true);
}

// A run gathered from another machine (results export, then import) is
// rejudged from the store it was imported into.
TEST_F(CliTest, RejudgeReadsAnImportedRun) {
  const fs::path runs = tmp_ / "runs";
  ASSERT_EQ(Kforge({"run", "--models", Cassette(), "--tasks", "1", "--name", "there", "--out",
                    runs.string(), "--compile-only"})
                .exit_code,
            0);
  const fs::path jsonl = tmp_ / "there.jsonl";
  ASSERT_EQ(
      Kforge({"results", "export", (runs / "there").string(), "-o", jsonl.string()}).exit_code, 0);
  const fs::path gathered = tmp_ / "gathered";
  ASSERT_EQ(Kforge({"results", "import", gathered.string(), jsonl.string()}).exit_code, 0);
  auto re = Kforge({"run", "--rejudge", gathered.string(), "--out", runs.string(), "--compile-only",
                    "--name", "here"});
  ASSERT_EQ(re.exit_code, 0) << re.err;
  EXPECT_EQ(ReadRun(runs / "here").kernels, ReadRun(runs / "there").kernels);
  auto named = Kforge({"run", "--rejudge", gathered.string() + ":there", "--out", runs.string(),
                       "--compile-only", "--name", "here"});
  EXPECT_EQ(named.exit_code, 64) << "the name is taken";
  EXPECT_NE(named.err.find("run 'here' already exists"), std::string::npos) << named.err;
}

}  // namespace
}  // namespace kforge
