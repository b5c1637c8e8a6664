// The real tasks/ folders of the source tree, when there are any: every one
// must load, instantiate at every W, dtype and size, and its oracle must run.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <string>

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

// A task ported from ParallelKernelBench names its problem first in its
// provenance ("PKB #N ..."), and N is the task's own number, so that a
// leaderboard's task can be set beside PKB's problem N and coverage counted.
TEST(RealTasks, PkbProvenanceNamesTheTasksOwnProblem) {
  const std::filesystem::path root = std::filesystem::path(KFORGE_SOURCE_ROOT) / "tasks";
  if (!std::filesystem::exists(root / "001_allreduce" / "task.toml"))
    GTEST_SKIP() << "no task folders under " << root;
  auto tasks = LoadTasks(root);
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  int ported = 0;
  for (const Task& t : *tasks) {
    const std::string prefix = "PKB #";
    ASSERT_EQ(t.provenance.rfind(prefix, 0), 0u) << t.key << ": " << t.provenance.substr(0, 60);
    size_t end = prefix.size();
    while (end < t.provenance.size() && std::isdigit(static_cast<unsigned char>(t.provenance[end])))
      ++end;
    ASSERT_GT(end, prefix.size()) << t.key;
    EXPECT_EQ(std::stoi(t.provenance.substr(prefix.size(), end - prefix.size())), t.id) << t.key;
    ++ported;
  }
  EXPECT_EQ(ported, static_cast<int>(tasks->size()));
}

}  // namespace
}  // namespace kforge::eval
