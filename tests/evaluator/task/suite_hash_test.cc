// The task-suite hash: stable, sensitive to every file that matters, blind
// to where the folder is.
#include "kforge/evaluator/suite_hash.h"

#include <gtest/gtest.h>

#include "kforge/core/fs.h"
#include "kforge/testing/test_util.h"

namespace kforge::eval {
namespace {

namespace fs = std::filesystem;

class SuiteHash : public ::testing::Test {
 protected:
  void Write(const std::string& name, const std::string& text) {
    ASSERT_TRUE(WriteFileAtomic(dir_ / name, text).ok());
  }
  testing::TempDir tmp_{"kforge-suite-hash"};
  const fs::path dir_ = tmp_.path();
};

TEST_F(SuiteHash, StableAndSensitiveToEveryTaskFile) {
  Write("001_a/task.toml", "id = 1\n");
  Write("001_a/reference.cu", "ref a");
  Write("002_b/task.toml", "id = 2\n");
  Write("002_b/solutions/s.cu", "sol");
  Write("CMakeLists.txt", "not a task");
  auto h1 = TaskSuiteHash(dir_);
  ASSERT_TRUE(h1.ok()) << h1.status().ToString();
  EXPECT_EQ(h1->size(), 64u);
  EXPECT_EQ(*TaskSuiteHash(dir_), *h1);
  // Hidden files and files outside task folders do not count.
  Write("001_a/.reference.cu.swp", "editor");
  Write("CMakeLists.txt", "changed, still not a task");
  EXPECT_EQ(*TaskSuiteHash(dir_), *h1);
  // A changed solution, a renamed file, an added task each do.
  Write("002_b/solutions/s.cu", "sol2");
  auto h2 = TaskSuiteHash(dir_);
  EXPECT_NE(*h2, *h1);
  fs::rename(dir_ / "002_b/solutions/s.cu", dir_ / "002_b/solutions/t.cu");
  auto h3 = TaskSuiteHash(dir_);
  EXPECT_NE(*h3, *h2);
  Write("003_c/task.toml", "id = 3\n");
  EXPECT_NE(*TaskSuiteHash(dir_), *h3);
  // Where the folder is does not matter.
  fs::copy(dir_, dir_.string() + "-copy", fs::copy_options::recursive);
  EXPECT_EQ(*TaskSuiteHash(dir_.string() + "-copy"), *TaskSuiteHash(dir_));
  std::error_code ec;
  fs::remove_all(dir_.string() + "-copy", ec);
  EXPECT_EQ(TaskSuiteHash(dir_ / "nothing").status().kind(), ErrorKind::kNotFound);
}

TEST(SuiteHashOfTheRepository, EveryTaskFolderIsCovered) {
  const fs::path tasks = fs::path(KFORGE_SOURCE_ROOT) / "tasks";
  auto h = TaskSuiteHash(tasks);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(*TaskSuiteHash(tasks), *h);
}

}  // namespace
}  // namespace kforge::eval
