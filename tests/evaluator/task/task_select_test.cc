// The task-selector grammar, the tasks folder and the checks before a task is
// posed (kforge/evaluator/task_select.h).
#include "kforge/evaluator/task_select.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "kforge/evaluator/task.h"

namespace kforge::eval {
namespace {

namespace fs = std::filesystem;

TEST(TaskSelect, SelectorsPickByKeyNumberNameGlobAndCategory) {
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

// Ranges of ids and the two suites: PKB's problems (1-87) and those beyond it (101-).
TEST(TaskSelect, SelectorsPickIdRangesAndTheTwoSuites) {
  std::vector<TaskRef> suite = {{"001_allreduce", "allreduce", 1, "collective"},
                                {"087_conv2d", "conv2d", 87, "spatial"},
                                {"101_decode_allreduce", "decode_allreduce", 101, "collective"},
                                {"118_device_barrier", "device_barrier", 118, "primitive"}};
  EXPECT_EQ(*SelectTasks({"pkb"}, suite),
            (std::vector<std::string>{"001_allreduce", "087_conv2d"}));
  EXPECT_EQ(*SelectTasks({"beyond"}, suite),
            (std::vector<std::string>{"101_decode_allreduce", "118_device_barrier"}));
  EXPECT_EQ(*SelectTasks({"87-101"}, suite),
            (std::vector<std::string>{"087_conv2d", "101_decode_allreduce"}));
  EXPECT_EQ(*SelectTasks({"001-1"}, suite), std::vector<std::string>{"001_allreduce"});
  auto empty = SelectTasks({"88-100"}, suite);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(), "task selector '88-100' matches no task");
  EXPECT_FALSE(SelectTasks({"9-2"}, suite).ok()) << "a reversed range is no range";
}

// `kforge eval --task 001` worked while `kforge run --tasks 001` did not: one
// grammar for every command, zero-padded numbers included.
TEST(TaskSelect, SelectorsTakeZeroPaddedNumbersAndKeysFromStoredRuns) {
  std::vector<TaskRef> suite = {{"001_allreduce", "allreduce", 1, "collective"},
                                {"010_tp_matmul", "tp_matmul", 10, "tensor_parallel"}};
  EXPECT_EQ(*SelectTasks({"001"}, suite), std::vector<std::string>{"001_allreduce"});
  EXPECT_EQ(*SelectTasks({"010"}, suite), std::vector<std::string>{"010_tp_matmul"});
  const TaskRef ref = RefFromKey("001_allreduce");
  EXPECT_EQ(ref.id, 1);
  EXPECT_EQ(ref.name, "allreduce");
  EXPECT_EQ(*SelectTasks({"allreduce"}, {ref}), std::vector<std::string>{"001_allreduce"});
}

// `kforge run` and `prompt` accepted --world 3 / --dtype f64 for a task declaring
// neither, and a negative size reached the model as "(does not instantiate)".
TEST(TaskSelect, ProblemsTheTaskDoesNotDeclareAreRefused) {
  const fs::path root(KFORGE_SOURCE_ROOT);
  auto tasks = LoadTasks(root / "tasks");
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  auto t = SelectOneTask(*tasks, "001", (root / "tasks").string());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->key, "001_allreduce");
  EXPECT_TRUE(CheckTaskProblem(**t, 2, "").ok());
  Status w3 = CheckTaskProblem(**t, 3, "");
  EXPECT_EQ(w3.kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(w3.message().find("supports W in {2, 4, 8}, not 3"), std::string::npos) << w3.message();
  Status f64 = CheckTaskProblem(**t, 2, "f64");
  EXPECT_NE(f64.message().find("not f64"), std::string::npos) << f64.message();

  Task negative = **t;
  ASSERT_FALSE(negative.check_sizes.empty());
  for (auto& [var, expr] : negative.check_sizes[0].vars) expr = "-7";
  Status neg = CheckTaskProblem(negative, 2, "");
  EXPECT_FALSE(neg.ok());
  EXPECT_NE(neg.message().find("task.toml"), std::string::npos) << neg.message();

  auto many = SelectOneTask(*tasks, "all", "tasks");
  EXPECT_FALSE(many.ok());
  auto none = SelectOneTask(*tasks, "nosuchtask", "tasks");
  EXPECT_NE(none.status().message().find("no task 'nosuchtask' in tasks"), std::string::npos);
}

// --tasks-dir wins over $KFORGE_TASKS_DIR, which wins over ./tasks.
TEST(TaskSelect, TheTasksFolderIsTheFlagThenTheEnvironmentThenTheWorkingTree) {
  const char* old = std::getenv("KFORGE_TASKS_DIR");
  const std::string saved = old ? old : "";
  ASSERT_EQ(setenv("KFORGE_TASKS_DIR", "/from/env", 1), 0);
  EXPECT_EQ(TasksDir("/from/flag"), fs::path("/from/flag"));
  EXPECT_EQ(TasksDir(""), fs::path("/from/env"));
  ASSERT_EQ(unsetenv("KFORGE_TASKS_DIR"), 0);
  const fs::path here = TasksDir("");
  EXPECT_TRUE(fs::is_directory(here)) << here;
  EXPECT_TRUE(fs::exists(here / "001_allreduce" / "task.toml")) << here;
  if (old) setenv("KFORGE_TASKS_DIR", saved.c_str(), 1);
}

}  // namespace
}  // namespace kforge::eval
