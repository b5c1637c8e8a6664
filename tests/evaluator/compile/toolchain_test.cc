// nvcc discovery order and its error message (an internal header of evaluator/compile).
#include "toolchain.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "kforge/core/fs.h"
#include "kforge/core/subprocess.h"

namespace kforge::eval {
namespace {

namespace fs = std::filesystem;

class ToolchainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("kforge-toolchain-test").value();
    ASSERT_TRUE(WriteFileAtomic(dir_ / "bin" / "nvcc", "#!/bin/sh\n").ok());
    chmod((dir_ / "bin" / "nvcc").c_str(), 0755);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(ToolchainTest, ExplicitPathWinsAndMustExist) {
  EXPECT_EQ(FindNvcc(dir_ / "bin" / "nvcc", "/elsewhere", {}).value(), dir_ / "bin" / "nvcc");
  Result<fs::path> missing = FindNvcc(dir_ / "nope", dir_.string(), {});
  EXPECT_EQ(missing.status().kind(), ErrorKind::kNotFound);
  EXPECT_NE(missing.status().message().find((dir_ / "nope").string() + " (given explicitly)"),
            std::string::npos);
}

TEST_F(ToolchainTest, CudaHomeBeforeDefaults) {
  EXPECT_EQ(FindNvcc({}, dir_.string(), {"/bin/sh"}).value(), dir_ / "bin" / "nvcc");
  EXPECT_EQ(FindNvcc({}, "", {dir_ / "absent", dir_ / "bin" / "nvcc"}).value(),
            dir_ / "bin" / "nvcc");
}

TEST_F(ToolchainTest, NotFoundNamesEveryPlaceLooked) {
  Result<fs::path> r =
      FindNvcc({}, (dir_ / "nocuda").string(), {dir_ / "a" / "nvcc", dir_ / "b" / "nvcc"});
  if (fs::path in_path = FindInPath("nvcc"); !in_path.empty()) {
    EXPECT_EQ(r.value(), in_path);  // PATH is the last resort
    return;
  }
  ASSERT_EQ(r.status().kind(), ErrorKind::kNotFound);
  const std::string& m = r.status().message();
  for (fs::path p : {dir_ / "nocuda" / "bin" / "nvcc", dir_ / "a" / "nvcc", dir_ / "b" / "nvcc"}) {
    EXPECT_NE(m.find(p.string()), std::string::npos) << m;
  }
  EXPECT_NE(m.find("$PATH"), std::string::npos) << m;
}

TEST(LibrarySearchDirsTest, IncludesTheToolkitNextToNvccAndSystemDirs) {
  std::vector<fs::path> dirs = LibrarySearchDirs("/opt/cuda-x/bin/nvcc");
  EXPECT_NE(std::find(dirs.begin(), dirs.end(), fs::path("/opt/cuda-x/lib64")), dirs.end());
  EXPECT_NE(std::find(dirs.begin(), dirs.end(), fs::path("/usr/lib")), dirs.end());
  std::set<fs::path> unique(dirs.begin(), dirs.end());
  EXPECT_EQ(unique.size(), dirs.size());
}

}  // namespace
}  // namespace kforge::eval
