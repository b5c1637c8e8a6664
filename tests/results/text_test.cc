// Line diff, CUDA highlighting and HTML escaping.
#include <gtest/gtest.h>

#include "report/line_diff.h"
#include "web/highlight.h"
#include "web/html.h"

namespace kforge::results {
namespace {

TEST(LineDiffTest, ProducesAMinimalEditScript) {
  const auto d = DiffLines("a\nb\nc\nd\n", "a\nx\nc\nd\ne\n");
  std::string ops;
  for (const auto& l : d) {
    ops += l.kind == DiffLine::Kind::kSame ? '=' : l.kind == DiffLine::Kind::kAdded ? '+' : '-';
    ops += l.text;
    ops += ' ';
  }
  // b replaced by x, e appended; the common lines a, c, d kept. The removed
  // line comes before the added one, as in every diff tool.
  EXPECT_EQ(ops, "=a -b +x =c =d +e ");
  EXPECT_EQ(UnifiedDiff(DiffLines("same\n", "same\n")), "") << "equal texts have no diff";
}

TEST(LineDiffTest, FoldsLongUnchangedRuns) {
  std::string before, after;
  for (int i = 0; i < 30; ++i) before += "line " + std::to_string(i) + "\n";
  after = before;
  after.replace(after.find("line 15"), 7, "LINE 15");
  const std::string u = UnifiedDiff(DiffLines(before, after), 2);
  EXPECT_NE(u.find("- line 15"), std::string::npos);
  EXPECT_LT(u.find("- line 15"), u.find("+ LINE 15")) << u;
  EXPECT_NE(u.find("+ LINE 15"), std::string::npos);
  EXPECT_NE(u.find("  line 13"), std::string::npos);
  EXPECT_EQ(u.find("line 3\n"), std::string::npos) << "far context folded";
  EXPECT_NE(u.find("…"), std::string::npos);
  const std::string h = DiffHtml(DiffLines("<a>\n", "<b>\n"));
  EXPECT_NE(h.find("<span class=\"del\">- &lt;a&gt;</span>"), std::string::npos) << h;
  EXPECT_NE(h.find("<span class=\"add\">+ &lt;b&gt;</span>"), std::string::npos) << h;
}

TEST(HighlightTest, MarksCudaKeywordsCommentsStringsAndEscapes) {
  const std::string h = HighlightCuda(
      "#include <x.h>\n__global__ void k(float* p) { // a < b\n  if (threadIdx.x < 4) p[0] = 1.5f; "
      "\"s<\"; }\n");
  EXPECT_NE(h.find("<span class=\"pp\">#include &lt;x.h&gt;</span>"), std::string::npos) << h;
  EXPECT_NE(h.find("<span class=\"cu\">__global__</span>"), std::string::npos);
  EXPECT_NE(h.find("<span class=\"ty\">void</span>"), std::string::npos);
  EXPECT_NE(h.find("<span class=\"com\">// a &lt; b</span>"), std::string::npos);
  EXPECT_NE(h.find("<span class=\"kw\">if</span>"), std::string::npos);
  EXPECT_NE(h.find("<span class=\"cu\">threadIdx</span>"), std::string::npos);
  EXPECT_NE(h.find("<span class=\"num\">1.5f</span>"), std::string::npos);
  EXPECT_NE(h.find("<span class=\"str\">&quot;s&lt;&quot;</span>"), std::string::npos);
  EXPECT_EQ(h.find("< 4"), std::string::npos) << "raw < must be escaped";
}

TEST(HtmlTest, EscapesAndBuildsSelfContainedDocuments) {
  EXPECT_EQ(HtmlEscape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
  const std::string page = HtmlDocument("t<1>", "<p>hi</p>");
  EXPECT_NE(page.find("<title>t&lt;1&gt;</title>"), std::string::npos);
  EXPECT_EQ(page.find("http://"), std::string::npos) << "no external resources";
  EXPECT_EQ(page.find("https://"), std::string::npos);
}

}  // namespace
}  // namespace kforge::results
