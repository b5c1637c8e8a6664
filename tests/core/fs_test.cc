#include "kforge/core/fs.h"

#include <gtest/gtest.h>

namespace kforge {
namespace {

TEST(FsTest, AtomicWriteThenReadRoundTrips) {
  auto dir = MakeTempDir("kforge-fs-test");
  ASSERT_TRUE(dir.ok());
  auto path = *dir / "a" / "b.txt";
  ASSERT_TRUE(WriteFileAtomic(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomic(path, "second").ok());
  auto content = ReadFile(path);
  ASSERT_TRUE(content.ok());
  EXPECT_EQ(*content, "second");
  std::filesystem::remove_all(*dir);
}

TEST(FsTest, ReadingAMissingFileIsNotFound) {
  auto r = ReadFile("/nonexistent/kforge/file");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/kforge/file"), std::string::npos);
}

}  // namespace
}  // namespace kforge
