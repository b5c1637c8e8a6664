// PlanRun with the real modules (replay provider, the repository's tasks and
// prompts, the real run store; compile-only, so no GPU): what a plan holds,
// and the name rules of a new run, a made-up name and a resume.
#include "kforge/agent/run_plan.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "kforge/evaluator/suite_hash.h"
#include "kforge/results/store.h"
#include "kforge/testing/test_util.h"

namespace kforge::agent {
namespace {

namespace fs = std::filesystem;

const fs::path kRoot(KFORGE_SOURCE_ROOT);

class RunPlanTest : public ::testing::Test {
 protected:
  RunConfig Config(const std::string& name) const {
    RunConfig c;
    c.name = name;
    c.models = {"replay:" + (kRoot / "examples/demo/cassette.jsonl").string()};
    c.tasks = {"001"};
    c.world = 2;
    c.compile_only = true;
    c.compile_jobs = 2;
    c.out = tmp_.path().string();
    c.tasks_dir = (kRoot / "tasks").string();
    return c;
  }
  kforge::testing::TempDir tmp_{"kforge-run-plan"};
};

TEST_F(RunPlanTest, APlanHoldsTheTasksPoolsPromptsAndStore) {
  auto plan = PlanRun(Config("p1"), {});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const RunPlan& p = **plan;
  EXPECT_EQ(p.run_dir, tmp_.path() / "p1");
  ASSERT_EQ(p.spec.tasks.size(), 1u);
  EXPECT_EQ(p.spec.tasks[0].key, "001_allreduce");
  EXPECT_TRUE(p.spec.compile_only);
  EXPECT_TRUE(p.pools->gpu.empty());
  EXPECT_EQ(p.pools->compile.size(), 2u);
  EXPECT_EQ(p.spec.pools.compile_slots, 2);
  ASSERT_EQ(p.notices.size(), 1u);
  EXPECT_NE(p.notices[0].find("no GPU evaluation (--compile-only)"), std::string::npos);
  EXPECT_EQ(p.spec.strategy, &p.strategy);
  EXPECT_EQ(p.spec.task_suite_hash, *eval::TaskSuiteHash(kRoot / "tasks"));
  EXPECT_EQ(p.spec.config["task_suite_hash"], p.spec.task_suite_hash);
  EXPECT_EQ(p.spec.config["resolved"]["tasks"], nlohmann::json::array({"001_allreduce"}));
  ASSERT_NE(p.store, nullptr);
  EXPECT_TRUE(fs::exists(results::StorePath(p.run_dir)));
  RunDeps deps = p.Deps();
  EXPECT_EQ(deps.compilers.size(), 2u);
  EXPECT_EQ(deps.store, p.store.get());
}

TEST_F(RunPlanTest, AStoredNameIsRefusedRenamedWhenMadeUpAndKeptOnResume) {
  {
    auto first = PlanRun(Config("night"), {});
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    RunPlan& p = **first;
    ASSERT_TRUE(
        p.store->CreateOrGetRun("night", p.spec.config, p.spec.task_suite_hash, p.spec.hardware)
            .ok());
  }
  RunConfig again = Config("night");
  again.world = 4;
  auto clash = PlanRun(again, {});
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(clash.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(clash.status().message().find("run 'night' already exists"), std::string::npos);
  EXPECT_NE(clash.status().message().find("world: 2 -> 4"), std::string::npos)
      << clash.status().message();

  PlanEnv made_up;
  made_up.default_name = true;
  auto renamed = PlanRun(Config("night"), made_up);
  ASSERT_TRUE(renamed.ok()) << renamed.status().ToString();
  EXPECT_EQ((*renamed)->config.name, "night-2");

  auto stored = StoredRunConfig(tmp_.path(), "night");
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->models, Config("night").models);
  EXPECT_EQ(StoredRunConfig(tmp_.path(), "day").status().kind(), ErrorKind::kNotFound);
  PlanEnv resume;
  resume.resume = true;
  auto resumed = PlanRun(*stored, resume);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ((*resumed)->config.name, "night");
}

// Another `kforge run` creates the same run directory after this one checked
// the name and before it created its store (two runs started in the same
// second): a made-up name moves on to the next suffix, a chosen one is
// refused, and neither writes into the other's store.
TEST_F(RunPlanTest, AStoreCreatedMeanwhileIsNeverShared) {
  std::vector<std::unique_ptr<results::RunStore>> others;
  PlanEnv env;
  // Runs after the name check and before the store is created.
  env.remote_pools = [&](const RunConfig&, const std::string&,
                         const fs::path& run_dir) -> Result<std::unique_ptr<EvalPools>> {
    auto other = results::RunStore::Open(run_dir);
    if (!other.ok()) return other.status();
    KF_RETURN_IF_ERROR(
        (*other)->CreateOrGetRun(run_dir.filename().string(), {}, "v", "h", {}).status());
    others.push_back(std::move(*other));
    return std::unique_ptr<EvalPools>();
  };
  env.default_name = true;
  auto made_up = PlanRun(Config("run-20261206-173703"), env);
  ASSERT_TRUE(made_up.ok()) << made_up.status().ToString();
  EXPECT_EQ((*made_up)->config.name, "run-20261206-173703-2");
  EXPECT_EQ((*made_up)->run_dir, tmp_.path() / "run-20261206-173703-2");
  EXPECT_EQ((*made_up)->spec.name, "run-20261206-173703-2");
  EXPECT_EQ((*made_up)->spec.config["name"], "run-20261206-173703-2");
  EXPECT_TRUE(fs::exists(results::StorePath(tmp_.path() / "run-20261206-173703-2")));

  env.default_name = false;
  auto chosen = PlanRun(Config("nightly"), env);
  ASSERT_FALSE(chosen.ok());
  EXPECT_EQ(chosen.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(chosen.status().message().find("by another kforge run"), std::string::npos)
      << chosen.status().message();
  auto runs = others.back()->ListRuns();
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->size(), 1u);
}

// Two runs planned at once under one made-up name get two directories.
TEST_F(RunPlanTest, TwoMadeUpNamesPlannedAtOnceDiffer) {
  PlanEnv env;
  env.default_name = true;
  Result<std::unique_ptr<RunPlan>> a = Error(ErrorKind::kInternal, "not run");
  Result<std::unique_ptr<RunPlan>> b = Error(ErrorKind::kInternal, "not run");
  std::thread ta([&] { a = PlanRun(Config("run-x"), env); });
  std::thread tb([&] { b = PlanRun(Config("run-x"), env); });
  ta.join();
  tb.join();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE((*a)->run_dir, (*b)->run_dir);
  EXPECT_EQ((std::set<std::string>{(*a)->config.name, (*b)->config.name}),
            (std::set<std::string>{"run-x", "run-x-2"}));
}

TEST_F(RunPlanTest, ABadSelectorStoresNothing) {
  RunConfig c = Config("bad");
  c.tasks = {"no_such_task"};
  auto plan = PlanRun(c, {});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("no_such_task"), std::string::npos)
      << plan.status().message();
  EXPECT_FALSE(fs::exists(results::StorePath(tmp_.path() / "bad")));
}

}  // namespace
}  // namespace kforge::agent
