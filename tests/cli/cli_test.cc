// The kforge CLI end to end: every mistake gets a clear message and an exit
// status from the one table (apps/kforge/exit_codes.h, docs/cli.md).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "kforge/core/fs.h"
#include "kforge/core/subprocess.h"
#include "kforge/results/fixture.h"
#include "kforge/results/store.h"

namespace kforge {
namespace {

namespace fs = std::filesystem;

const fs::path kRoot(KFORGE_SOURCE_ROOT);

std::string Cassette() { return "replay:" + (kRoot / "examples/demo/cassette.jsonl").string(); }

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = MakeTempDir("kforge-cli-test");
    ASSERT_TRUE(dir.ok());
    tmp_ = *dir;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }

  ProcessResult Kforge(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
    args.insert(args.begin(), KFORGE_BIN);
    ProcessOptions o;
    o.cwd = kRoot;
    o.env = std::move(env);
    o.env["XDG_CACHE_HOME"] = (tmp_ / "cache").string();
    o.timeout = std::chrono::minutes(3);
    auto r = RealProcessRunner().Run(args, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : ProcessResult{};
  }

  fs::path tmp_;
};

TEST_F(CliTest, UsageErrorsExit64NotCli11Codes) {
  EXPECT_EQ(Kforge({}).exit_code, 64);
  auto typo = Kforge({"run", "--modles", Cassette(), "--tasks", "1"});
  EXPECT_EQ(typo.exit_code, 64);
  EXPECT_NE(typo.err.find("--modles"), std::string::npos) << typo.err;
  EXPECT_EQ(typo.err.find("run_file"), std::string::npos) << typo.err;
  EXPECT_NE(typo.err.find("did you mean --models?"), std::string::npos) << typo.err;
  auto help = Kforge({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("Exit status"), std::string::npos) << help.out;
}

TEST_F(CliTest, RunRefusesUnusableModelsBeforeCreatingAStore) {
  auto r = Kforge({"run", "--models", "bogus:foo", "--tasks", "1", "--name", "badprov", "--out",
                   tmp_.string()});
  EXPECT_EQ(r.exit_code, 64) << r.err;
  EXPECT_NE(r.err.find("bogus"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp_ / "badprov"));
  auto missing = Kforge({"run", "--models", "replay:" + (tmp_ / "nope.jsonl").string(), "--tasks",
                         "1", "--name", "nocassette", "--out", tmp_.string()});
  EXPECT_EQ(missing.exit_code, 64) << missing.err;
  EXPECT_FALSE(fs::exists(tmp_ / "nocassette"));
}

TEST_F(CliTest, WorldAndDtypeTheTaskDoesNotDeclareAreRefusedEverywhere) {
  auto run = Kforge({"run", "--models", Cassette(), "--tasks", "001", "--world", "3", "--name",
                     "w3", "--out", tmp_.string()});
  EXPECT_EQ(run.exit_code, 64) << run.err;
  EXPECT_NE(run.err.find("supports W in {2, 4, 8}, not 3"), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(tmp_ / "w3"));
  auto prompt = Kforge({"prompt", "--task", "1", "--dtype", "f16", "--hardware", "h100_8"});
  EXPECT_EQ(prompt.exit_code, 64) << prompt.err;
  EXPECT_NE(prompt.err.find("not f16"), std::string::npos) << prompt.err;
  const std::string kernel = (kRoot / "tasks/001_allreduce/solutions/oneshot.cu").string();
  auto eval = Kforge({"eval", "--task", "allreduce", "--kernel", kernel, "--world", "3"});
  EXPECT_EQ(eval.exit_code, 64) << eval.err;
  // --tasks 001 and --task 001 mean the same task.
  auto p = Kforge({"prompt", "--task", "001", "--hardware", "h100_8"});
  EXPECT_EQ(p.exit_code, 0) << p.err;
}

TEST_F(CliTest, ReusingARunNameIsRefusedSayingWhatDiffers) {
  {
    auto store = results::RunStore::Open(tmp_ / "same");
    ASSERT_TRUE(store.ok());
    nlohmann::json config = {{"name", "same"},       {"models", {Cassette()}}, {"tasks", {"1"}},
                             {"strategy", "refine"}, {"repeats", 1},           {"world", 2},
                             {"dtype", ""},          {"out", tmp_.string()}};
    ASSERT_TRUE((*store)->CreateOrGetRun("same", config, "v", "", {}).ok());
  }
  auto r = Kforge({"run", "--models", Cassette(), "--tasks", "2", "--strategy", "one-shot",
                   "--name", "same", "--out", tmp_.string()});
  EXPECT_EQ(r.exit_code, 64) << r.err;
  EXPECT_NE(r.err.find("run 'same' already exists"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("strategy: \"refine\" -> \"one-shot\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--resume same"), std::string::npos) << r.err;
}

TEST_F(CliTest, CompareValidatesEveryOption) {
  for (const char* name : {"a", "b"}) {
    results::FixtureSpec spec;
    spec.run_name = name;
    spec.tasks = 2;
    ASSERT_TRUE(results::WriteFixtureRun(tmp_ / name, spec).ok());
  }
  const std::string a = (tmp_ / "a").string(), b = (tmp_ / "b").string();
  EXPECT_EQ(Kforge({"compare", a, b}).exit_code, 0);
  auto conf = Kforge({"compare", a, b, "--confidence", "5"});
  EXPECT_EQ(conf.exit_code, 64);
  EXPECT_NE(conf.err.find("--confidence 5"), std::string::npos) << conf.err;
  EXPECT_EQ(conf.out.find("500%"), std::string::npos) << conf.out;
  EXPECT_EQ(Kforge({"compare", a, b, "--resamples", "0"}).exit_code, 64);
  EXPECT_EQ(Kforge({"compare", a, b, "--format", "xml"}).exit_code, 64);
  EXPECT_EQ(Kforge({"serve", a, "--port", "99999"}).exit_code, 64);
  // show's TASK takes the same selectors as every other command.
  auto show = Kforge({"show", a, "1"});
  EXPECT_EQ(show.exit_code, 0) << show.err;
  EXPECT_EQ(Kforge({"show", a, "nosuchtask"}).exit_code, 66);
}

// Without a GPU, eval falls back to compile-only: that is not a pass.
TEST_F(CliTest, EvalWithoutAGpuIsNotEvaluatedAndExitsEight) {
  const std::string kernel = (kRoot / "tasks/001_allreduce/solutions/oneshot.cu").string();
  auto r = Kforge({"eval", "--task", "1", "--kernel", kernel, "--world", "2"},
                  {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_EQ(r.exit_code, 8) << r.out << r.err;
  EXPECT_NE(r.out.find("NOT EVALUATED"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("world 0"), std::string::npos) << r.out;
  // Asked for explicitly, compile-only succeeds.
  auto asked = Kforge({"eval", "--task", "1", "--kernel", kernel, "--compile-only"});
  EXPECT_EQ(asked.exit_code, 0) << asked.out << asked.err;
}

}  // namespace
}  // namespace kforge
