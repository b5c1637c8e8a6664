// The real tasks/ folders of the source tree, when there are any: every one
// must load, instantiate at every W, dtype and size, and its oracle must run.
#include <gtest/gtest.h>

#include <filesystem>

#include "kforge/evaluator/task.h"
#include "kforge/evaluator/task_check.h"

namespace kforge::eval {
namespace {

TEST(RealTasks, EveryTaskFolderValidates) {
  const std::filesystem::path root = std::filesystem::path(KFORGE_SOURCE_ROOT) / "tasks";
  bool any = false;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    any = any || std::filesystem::exists(e.path() / "task.toml");
  }
  if (!any) GTEST_SKIP() << "no task folders under " << root;
  auto tasks = LoadTasks(root);
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  for (const Task& t : *tasks) {
    SCOPED_TRACE(t.key);
    Status shapes = ValidateShapes(t);
    EXPECT_TRUE(shapes.ok()) << shapes.ToString();
    if (!shapes.ok()) continue;
    // Small problems only, to stay quick; `kforge tasks validate` runs them all.
    auto oracle = CheckOracle(t, 0x5eed, 1 << 18);
    ASSERT_TRUE(oracle.ok()) << oracle.status().ToString();
    EXPECT_GT(oracle->problems, 0);
  }
}

}  // namespace
}  // namespace kforge::eval
