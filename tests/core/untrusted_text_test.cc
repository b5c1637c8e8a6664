#include "kforge/core/untrusted_text.h"

#include <gtest/gtest.h>

#include <string>

namespace kforge {
namespace {

// A forged verdict that would redraw the terminal line above it.
TEST(PrintableText, StripsEscapesAndControlCharacters) {
  const std::string forged =
      "ok\r\x1b[2K\x1b[1A\x1b[32mstatus    passed\x1b[0m\x1b]0;title\a\x1b]8;;http://x\x1b\\"
      "link\x1b(B\x07\x08\x7f\xc2\x9b"
      "31mred\tend\n";
  EXPECT_EQ(PrintableText(forged, true), "okstatus    passedlinkred\tend\n");
  EXPECT_EQ(PrintableText("a\nb\n", false), "a b ");
  EXPECT_EQ(PrintableText("caf\xc3\xa9", true), "caf\xc3\xa9");  // UTF-8 kept
  EXPECT_EQ(PrintableText("\x1b[", true), "");                   // unterminated
  EXPECT_EQ(PrintableText("x\x1b", true), "x");
}

TEST(BoundedCapture, KeepsHeadAndTailAndCountsTheRest) {
  BoundedCapture c(8, 8);
  c.Append("HEAD");
  c.Append("head");
  for (int i = 0; i < 1000; ++i) c.Append("middle-middle-");
  c.Append("tailTAIL");
  EXPECT_EQ(c.total_bytes(), 8u + 14000u + 8u);
  EXPECT_EQ(c.cut_bytes(), 14000u);
  EXPECT_EQ(c.Text(), "HEADhead\n[kforge: 14000 bytes cut of 14016]\ntailTAIL");
  BoundedCapture small(8, 8);
  small.Append("short\n");
  EXPECT_EQ(small.cut_bytes(), 0u);
  EXPECT_EQ(small.Text(), "short\n");
  BoundedCapture tail_only(0, 4);
  tail_only.Append("abcdef");
  tail_only.Append("gh");
  EXPECT_EQ(tail_only.Text(), "\n[kforge: 4 bytes cut of 8]\nefgh");
}

}  // namespace
}  // namespace kforge
