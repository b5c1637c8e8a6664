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

// Every task has a physical floor at every bench size, world size and dtype:
// it is what a time that no GPU can reach is rejected against
// (docs/methodology.md), so a task without one has no plausibility check.
TEST(RealTasks, EveryBenchSizeHasAPhysicalFloor) {
  const std::filesystem::path root = std::filesystem::path(KFORGE_SOURCE_ROOT) / "tasks";
  if (!std::filesystem::exists(root / "001_allreduce" / "task.toml"))
    GTEST_SKIP() << "no task folders under " << root;
  auto tasks = LoadTasks(root);
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  for (const Task& t : *tasks) {
    for (int w : t.world_sizes) {
      for (Dtype dt : t.dtypes) {
        for (const SizeSpec& size : t.bench_sizes) {
          auto p = Instantiate(t, w, dt, size, false);
          ASSERT_TRUE(p.ok()) << p.status().ToString();
          EXPECT_GT(p->floor_hbm_bytes + p->floor_flops, 0)
              << t.key << " W=" << w << " " << DtypeName(dt) << " " << size.label;
          if (w > 1 && t.category == "collective") {
            EXPECT_GT(p->floor_link_bytes, 0) << t.key << " W=" << w << " " << size.label;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kforge::eval
