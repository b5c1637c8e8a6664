// `kforge run --resume` as a user meets it from another working directory.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli_fixture.h"
#include "kforge/core/fs.h"
#include "kforge/results/store.h"

namespace kforge {
namespace {

namespace fs = std::filesystem;

ProcessResult KforgeIn(const fs::path& cwd, std::vector<std::string> args, const fs::path& cache) {
  args.insert(args.begin(), KFORGE_BIN);
  ProcessOptions o;
  o.cwd = cwd;
  o.env["XDG_CACHE_HOME"] = cache.string();
  o.timeout = std::chrono::minutes(3);
  auto r = RealProcessRunner().Run(args, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ProcessResult{};
}

// A run started in A with relative paths (tasks folder, strategy file,
// registry, out) and resumed from B: the stored paths are absolute, so the
// resume finds the same tasks, strategy and registry.
TEST_F(CliTest, AResumeFromAnotherDirectoryFindsTheRunsFiles) {
  const fs::path a = tmp_ / "a", b = tmp_ / "b";
  fs::create_directories(b);
  fs::create_directories(a);
  fs::create_directory_symlink(kRoot / "tasks", a / "mytasks");
  // A strategy file of one's own finds its templates beside its folder.
  fs::create_directories(a / "prompts/strategies");
  fs::create_directory_symlink(kRoot / "prompts/templates", a / "prompts/templates");
  fs::copy_file(kRoot / "prompts/strategies/refine.toml", a / "prompts/strategies/mine.toml");
  ASSERT_TRUE(WriteFileAtomic(a / "reg.toml",
                              "[providers.mybox]\nwire = \"openai_chat\"\n"
                              "base_url = \"http://127.0.0.1:9/v1\"\n"
                              "key_required = false\n")
                  .ok());
  const fs::path cache = tmp_ / "cache";
  auto first =
      KforgeIn(a,
               {"run", "--models", Cassette(), "--tasks", "1", "--name", "far", "--out", "runs",
                "--tasks-dir", "mytasks", "--strategy", "prompts/strategies/mine.toml",
                "--registry", "reg.toml", "--compile-only", "--deadline", "2020-01-01T00:00"},
               cache);
  ASSERT_EQ(first.exit_code, 0) << first.err;

  auto resumed = KforgeIn(b,
                          {"run", "--resume", "far", "--out", (a / "runs").string(),
                           "--compile-only", "--deadline", "+1h"},
                          cache);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  auto store = results::RunStore::Open(a / "runs" / "far", true);
  ASSERT_TRUE(store.ok());
  auto runs = (*store)->ListRuns();
  ASSERT_TRUE(runs.ok() && runs->size() == 1u);
  const auto& config = runs->front().config;
  EXPECT_EQ(config["tasks_dir"], (a / "mytasks").string());
  EXPECT_EQ(config["strategy"], (a / "prompts/strategies/mine.toml").string());
  EXPECT_EQ(config["registries"][0], (a / "reg.toml").string());
  auto sessions = (*store)->ListSessions(runs->front().id);
  ASSERT_TRUE(sessions.ok() && sessions->size() == 1u);
  EXPECT_GT((*sessions)[0].turns_done, 0) << resumed.err;
}

}  // namespace
}  // namespace kforge
