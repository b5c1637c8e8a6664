// Tokens files (mode, format, messages that never quote a token).
#include "kforge/remote/tokens.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "kforge/core/fs.h"
#include "kforge/testing/test_util.h"

namespace kforge::remote {
namespace {

namespace fs = std::filesystem;

class TempDir : public ::testing::Test {
 protected:
  fs::path Write(const std::string& name, const std::string& text, mode_t mode) {
    const fs::path p = dir_ / name;
    EXPECT_TRUE(WriteFileAtomic(p, text).ok());
    ::chmod(p.c_str(), mode);
    return p;
  }
  testing::TempDir tmp_{"kforge-tokens"};
  const fs::path dir_ = tmp_.path();
};

using Tokens = TempDir;

const std::string kA = "aaaaaaaaaaaaaaaaaaaaaaaa-token-a";
const std::string kB = "bbbbbbbbbbbbbbbbbbbbbbbb-token-b";

TEST_F(Tokens, AFileOthersCanReadIsRefusedWithTheFix) {
  const fs::path p = Write("tokens", kA + "\n", 0644);
  auto set = TokenSet::Load(p);
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(set.status().message().find("0644"), std::string::npos) << set.status().message();
  EXPECT_NE(set.status().message().find("chmod 600 " + p.string()), std::string::npos);
  EXPECT_EQ(set.status().message().find(kA), std::string::npos);
  ::chmod(p.c_str(), 0640);
  EXPECT_FALSE(TokenSet::Load(p).ok());
  ::chmod(p.c_str(), 0600);
  EXPECT_TRUE(TokenSet::Load(p).ok());
  ::chmod(p.c_str(), 0400);
  EXPECT_TRUE(TokenSet::Load(p).ok());
  EXPECT_EQ(TokenSet::Load(dir_ / "missing").status().kind(), ErrorKind::kNotFound);
}

TEST_F(Tokens, OneTokenALineCommentsSkippedMatchesByIndex) {
  auto set =
      TokenSet::Load(Write("tokens", "# lab tokens\n\n  " + kA + "  \n" + kB + "\r\n", 0600));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->size(), 2u);
  EXPECT_EQ(set->Match(kA), 0);
  EXPECT_EQ(set->Match(kB), 1);
  EXPECT_EQ(set->line(0), 3);
  EXPECT_EQ(set->line(1), 4);
  EXPECT_EQ(set->Match(""), -1);
  EXPECT_EQ(set->Match(kA.substr(0, kA.size() - 1)), -1);
  EXPECT_EQ(set->Match(kA + "x"), -1);
}

TEST_F(Tokens, BadTokensAreNamedByLineNeverQuoted) {
  auto short_one = TokenSet::Load(Write("short", kA + "\nshort\n", 0600));
  ASSERT_FALSE(short_one.ok());
  EXPECT_NE(short_one.status().message().find(":2:"), std::string::npos)
      << short_one.status().message();
  EXPECT_EQ(short_one.status().message().find("short\n"), std::string::npos);
  auto spaced = TokenSet::Load(Write("spaced", "has a space in it 0123456789\n", 0600));
  ASSERT_FALSE(spaced.ok());
  EXPECT_EQ(spaced.status().message().find("has a space"), std::string::npos);
  EXPECT_FALSE(TokenSet::Load(Write("empty", "# nothing\n\n", 0600)).ok());
}

TEST_F(Tokens, TheClientReadsAFileOrTheEnvironment) {
  ::unsetenv("KFORGE_TEST_TOKEN");
  auto none = LoadClientToken({}, "KFORGE_TEST_TOKEN");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("$KFORGE_TEST_TOKEN"), std::string::npos);
  ::setenv("KFORGE_TEST_TOKEN", kB.c_str(), 1);
  auto env = LoadClientToken({}, "KFORGE_TEST_TOKEN");
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(*env, kB);
  auto file = LoadClientToken(Write("mine", "# mine\n" + kA + "\n", 0600), "KFORGE_TEST_TOKEN");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(*file, kA);  // the file wins over the environment
  EXPECT_FALSE(LoadClientToken(Write("open", kA + "\n", 0644), "KFORGE_TEST_TOKEN").ok());
  ::unsetenv("KFORGE_TEST_TOKEN");
}

}  // namespace
}  // namespace kforge::remote
