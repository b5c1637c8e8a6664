#include "kforge/core/scan.h"

#include <gtest/gtest.h>

#include <string>

namespace kforge::scan {
namespace {

TEST(ScanTest, CharacterClassesAreAsciiOnly) {
  for (char c : std::string(" \t\n\v\f\r")) EXPECT_TRUE(IsSpace(c)) << int(c);
  EXPECT_FALSE(IsSpace('\0'));
  EXPECT_FALSE(IsSpace('\xa0'));
  EXPECT_TRUE(IsWordChar('_'));
  EXPECT_TRUE(IsWordChar('Z'));
  EXPECT_TRUE(IsWordChar('7'));
  EXPECT_FALSE(IsWordChar('-'));
  EXPECT_FALSE(IsWordChar('\xe9'));
  EXPECT_FALSE(IsUpper('a'));
  EXPECT_EQ(ToLower('Q'), 'q');
  EXPECT_EQ(ToLower('['), '[');
}

TEST(ScanTest, SkipWhileStopsAtTheFirstMismatchOrTheEnd) {
  EXPECT_EQ(SkipWhile("  x", 0, IsSpace), 2u);
  EXPECT_EQ(SkipWhile("123", 1, IsDigit), 3u);
  EXPECT_EQ(SkipWhile("abc", 3, IsDigit), 3u);
  EXPECT_EQ(SkipWhile("abc", 7, IsDigit), 7u);  // past the end: unchanged, nothing read
}

TEST(ScanTest, AtAndFindIgnoreCase) {
  EXPECT_TRUE(At("#include", 1, "include"));
  EXPECT_FALSE(At("#includ", 1, "include"));
  EXPECT_FALSE(At("ab", 3, ""));
  EXPECT_TRUE(At("ab", 2, ""));
  EXPECT_TRUE(AtIgnoreCase("Try Again", 0, "try again"));
  EXPECT_FALSE(AtIgnoreCase("Try", 0, "try again"));
  EXPECT_EQ(FindIgnoreCase("xx TRY again", "try again"), 3u);
  EXPECT_EQ(FindIgnoreCase("try again try again", "try again", 1), 10u);
  EXPECT_EQ(FindIgnoreCase("try agai", "try again"), std::string_view::npos);
  EXPECT_EQ(FindIgnoreCase("abc", "", 3), 3u);
}

}  // namespace
}  // namespace kforge::scan
