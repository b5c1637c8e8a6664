#include "kforge/agent/run_config.h"

#include <gtest/gtest.h>

#include "kforge/agent/task_select.h"

namespace kforge::agent {
namespace {

TEST(RunConfig, ParsesARunFileAndRoundTripsThroughJson) {
  auto c = ParseRunFile(
      "name = \"n\"\nmodels = [\"a:x\", \"b:y\"]\ntasks = \"category:collective\"\nturns = "
      "6\nworld = 8\n"
      "gpus = [0, 1]\n[budget]\nusd = 10.0\n[budget.per_model]\ntokens = "
      "1000\n[budget.per_task]\nusd = 0.5\n",
      "r.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models, (std::vector<std::string>{"a:x", "b:y"}));
  EXPECT_EQ(c->tasks, std::vector<std::string>{"category:collective"});
  EXPECT_EQ(*c->turns, 6);
  EXPECT_EQ(c->world, 8);
  EXPECT_EQ(*c->budgets.run.usd, 10.0);
  EXPECT_EQ(*c->budgets.per_model.tokens, 1000);
  EXPECT_EQ(*c->budgets.per_task.usd, 0.5);
  auto back = RunConfigFromJson(RunConfigToJson(*c));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(RunConfigToJson(*back), RunConfigToJson(*c));
}

TEST(RunConfig, ErrorsNameFileLineAndField) {
  auto c = ParseRunFile("models = [\"a\"]\ntasks = [\"1\"]\nworld = 0\n", "r.toml");
  EXPECT_EQ(c.status().message(), "r.toml:3: world: expected an integer >= 1");
  c = ParseRunFile("models = [\"a\"]\ntasks = [\"1\"]\n[budget]\ndollars = 3\n", "r.toml");
  EXPECT_EQ(c.status().message(),
            "r.toml:4: budget.dollars: unknown field (usd, tokens, wall_s, per_model, per_task)");
  c = ParseRunFile("tasks = [\"1\"]\n", "r.toml");
  EXPECT_EQ(c.status().message(), "r.toml:0: models: at least one model is required");
}

TEST(RunConfig, SelectorsPickByKeyNumberNameGlobAndCategory) {
  std::vector<TaskRef> suite = {{"001_allreduce", "allreduce", 1, "collective"},
                                {"002_allgather", "allgather", 2, "collective"},
                                {"010_tp_matmul", "tp_matmul", 10, "tensor_parallel"}};
  EXPECT_EQ(*SelectTasks({"2", "allreduce"}, suite),
            (std::vector<std::string>{"001_allreduce", "002_allgather"}));
  EXPECT_EQ(*SelectTasks({"*matmul"}, suite), std::vector<std::string>{"010_tp_matmul"});
  EXPECT_EQ(SelectTasks({"category:collective"}, suite)->size(), 2u);
  EXPECT_EQ(SelectTasks({"tensor_parallel"}, suite)->size(), 1u);
  EXPECT_EQ(SelectTasks({"all"}, suite)->size(), 3u);
  auto none = SelectTasks({"9*"}, suite);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "task selector '9*' matches no task");
}

// `kforge eval --task 001` worked while `kforge run --tasks 001` did not: one
// grammar for every command, zero-padded numbers included.
TEST(RunConfig, SelectorsTakeZeroPaddedNumbersAndKeysFromStoredRuns) {
  std::vector<TaskRef> suite = {{"001_allreduce", "allreduce", 1, "collective"},
                                {"010_tp_matmul", "tp_matmul", 10, "tensor_parallel"}};
  EXPECT_EQ(*SelectTasks({"001"}, suite), std::vector<std::string>{"001_allreduce"});
  EXPECT_EQ(*SelectTasks({"010"}, suite), std::vector<std::string>{"010_tp_matmul"});
  const TaskRef ref = RefFromKey("001_allreduce");
  EXPECT_EQ(ref.id, 1);
  EXPECT_EQ(ref.name, "allreduce");
  EXPECT_EQ(*SelectTasks({"allreduce"}, {ref}), std::vector<std::string>{"001_allreduce"});
}

TEST(RunConfig, DifferencesNameEachFieldAskedDifferently) {
  RunConfig stored;
  stored.name = "same";
  stored.models = {"replay:x"};
  stored.tasks = {"1"};
  RunConfig asked = stored;
  asked.out = "elsewhere";
  EXPECT_TRUE(RunConfigDifferences(stored, asked).empty());
  asked.tasks = {"2"};
  asked.strategy = "one-shot";
  EXPECT_EQ(RunConfigDifferences(stored, asked),
            (std::vector<std::string>{"strategy: \"refine\" -> \"one-shot\"",
                                      "tasks: [\"1\"] -> [\"2\"]"}));
}

TEST(RunConfig, Deadlines) {
  EXPECT_DOUBLE_EQ(*ParseDeadline("+2h", 1000), 1000 + 7200);
  EXPECT_DOUBLE_EQ(*ParseDeadline("+90m", 0), 5400);
  EXPECT_DOUBLE_EQ(*ParseDeadline("1700000000", 0), 1.7e9);
  EXPECT_FALSE(ParseDeadline("tomorrow", 0).ok());
}

}  // namespace
}  // namespace kforge::agent
