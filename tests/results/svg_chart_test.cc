// The SVG charts' legends: model names that share a long prefix stay
// distinguishable in the legend's narrow column.
#include "web/svg_chart.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace kforge::results {
namespace {

// The text of each legend item, and each item's tooltip, in order.
void LegendOf(const std::string& svg, std::vector<std::string>* labels,
              std::vector<std::string>* titles) {
  const size_t legend = svg.find("<g class=\"legend\">");
  ASSERT_NE(legend, std::string::npos) << svg;
  // Each item: <g class="legend-item"><title>T</title><rect .../><text ...>L</text></g>
  const std::string open = "<g class=\"legend-item\"><title>";
  for (size_t at = svg.find(open, legend); at != std::string::npos; at = svg.find(open, at + 1)) {
    const size_t t0 = at + open.size(), t1 = svg.find("</title>", t0);
    const size_t text = svg.find("<text", t1), l0 = svg.find('>', text) + 1,
                 l1 = svg.find("</text>", l0);
    ASSERT_NE(t1, std::string::npos) << svg.substr(at, 200);
    ASSERT_NE(l1, std::string::npos) << svg.substr(at, 200);
    ASSERT_LT(l1, svg.find("</g>", at)) << "the label is outside its item: " << svg.substr(at, 200);
    titles->push_back(svg.substr(t0, t1 - t0));
    labels->push_back(svg.substr(l0, l1 - l0));
  }
}

// Characters as a reader counts them (the ellipsis is one).
size_t Chars(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

TEST(SvgChart, LegendsTellModelsWithASharedPrefixApart) {
  const std::vector<std::string> names = {"openai:gpt-5.5 / refine", "openai:gpt-5.5-mini / refine",
                                          "openai:gpt-5.5-2026-01-15-preview / refine",
                                          "openai:gpt-5.5-2026-03-01-preview / refine"};
  std::vector<ChartSeries> series;
  for (const auto& n : names) series.push_back({n, {{1, 0.5}, {2, 0.25}}});
  for (const std::string& svg : {LineChart("fastp", "fast_p", "p", "fast_p", series),
                                 SpeedupStrips("speedups", "speedups", series),
                                 ScatterChart("cost", "cost", "solved", "usd", series)}) {
    std::vector<std::string> labels, titles;
    LegendOf(svg, &labels, &titles);
    ASSERT_EQ(labels.size(), names.size()) << svg;
    EXPECT_EQ(titles, names) << "the full names are the tooltips";
    EXPECT_EQ(std::set<std::string>(labels.begin(), labels.end()).size(), names.size())
        << "two legend labels read the same";
    for (const auto& l : labels) EXPECT_LE(Chars(l), 20u) << l << " does not fit the legend";
    EXPECT_EQ(labels[0], "gpt-5.5");
    EXPECT_EQ(labels[1], "gpt-5.5-mini");
  }
}

TEST(SvgChart, ShortDistinctNamesAreShownWhole) {
  std::vector<ChartSeries> series = {{"a:x", {{1, 1}}}, {"b:y", {{1, 1}}}};
  std::vector<std::string> labels, titles;
  LegendOf(LineChart("c", "t", "x", "y", series), &labels, &titles);
  EXPECT_EQ(labels, (std::vector<std::string>{"a:x", "b:y"}));
}

}  // namespace
}  // namespace kforge::results
