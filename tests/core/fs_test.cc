#include "kforge/core/fs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

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

// Stores, caches and token files stay private; published outputs get what
// creat(path, 0666) would give under the umask, also when replacing a file.
TEST(FsTest, PublishedFilesFollowTheUmaskAtomicWritesStayPrivate) {
  auto dir = MakeTempDir("kforge-fs-test");
  ASSERT_TRUE(dir.ok());
  namespace fs = std::filesystem;
  for (const mode_t mask : {mode_t{022}, mode_t{077}, mode_t{002}}) {
    const mode_t old = umask(mask);
    const fs::path published = *dir / ("page" + std::to_string(mask) + ".html");
    const fs::path secret = *dir / ("token" + std::to_string(mask));
    const Status p1 = WritePublishedFile(published, "<p>1</p>");
    const Status p2 = WritePublishedFile(published, "<p>2</p>");
    const Status s = WriteFileAtomic(secret, "t");
    umask(old);
    ASSERT_TRUE(p1.ok() && p2.ok() && s.ok());
    EXPECT_EQ(fs::status(published).permissions(), static_cast<fs::perms>(0666 & ~mask))
        << "umask 0" << std::oct << mask;
    EXPECT_EQ(fs::status(secret).permissions(), static_cast<fs::perms>(0600));
    EXPECT_EQ(*ReadFile(published), "<p>2</p>");
  }
  fs::remove_all(*dir);
}

// A new file is written whole with the published mode; an existing one is
// never replaced, and the error names it. No temporary file is left behind.
TEST(FsTest, ANewFileNeverReplacesAnExistingOne) {
  auto dir = MakeTempDir("kforge-fs-test");
  ASSERT_TRUE(dir.ok());
  namespace fs = std::filesystem;
  const fs::path path = *dir / "exploit.cu";
  ASSERT_TRUE(WriteNewPublishedFile(path, "first").ok());
  const Status again = WriteNewPublishedFile(path, "second");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(again.message().find(path.string() + " exists"), std::string::npos) << again.message();
  EXPECT_EQ(*ReadFile(path), "first");
  int files = 0;
  for (const auto& e : fs::directory_iterator(*dir)) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);
  fs::remove_all(*dir);
}

TEST(FsTest, ReadingAMissingFileIsNotFound) {
  auto r = ReadFile("/nonexistent/kforge/file");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/kforge/file"), std::string::npos);
}

}  // namespace
}  // namespace kforge
