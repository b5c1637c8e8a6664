#include "web/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "web/html.h"

namespace kforge::results {

namespace {

constexpr double kW = 560, kH = 320, kLeft = 56, kRight = 150, kTop = 30, kBottom = 44;
constexpr double kPlotW = kW - kLeft - kRight, kPlotH = kH - kTop - kBottom;

struct Range {
  double lo, hi;
  double Map(double v, double out_lo, double out_hi) const {
    const double span = hi - lo == 0 ? 1 : hi - lo;
    return out_lo + (v - lo) / span * (out_hi - out_lo);
  }
};

std::string Open(const std::string& css_class, const std::string& title) {
  return fmt::format(
      "<svg class=\"chart {}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" role=\"img\"><title>{}</title>"
      "<text x=\"{}\" y=\"18\" font-weight=\"600\">{}</text>",
      css_class, kW, kH, kW, kH, HtmlEscape(title), kLeft, HtmlEscape(title));
}

std::string Axes(const Range& x, const Range& y, const std::string& x_label,
                 const std::string& y_label, int x_ticks, int y_ticks, bool x_log2 = false) {
  std::string s;
  for (int i = 0; i <= y_ticks; ++i) {
    const double v = y.lo + (y.hi - y.lo) * i / y_ticks;
    const double py = y.Map(v, kTop + kPlotH, kTop);
    s += fmt::format("<line class=\"grid\" x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\"/>",
                     kLeft, py, kLeft + kPlotW, py);
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.3g}</text>", kLeft - 6,
                     py + 4, v);
  }
  for (int i = 0; i <= x_ticks; ++i) {
    const double v = x.lo + (x.hi - x.lo) * i / x_ticks;
    const double px = x.Map(v, kLeft, kLeft + kPlotW);
    const std::string label =
        x_log2 ? fmt::format("{:.2g}x", std::exp2(v)) : fmt::format("{:.3g}", v);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>", px,
                     kTop + kPlotH + 16, label);
  }
  s += fmt::format("<line class=\"axis\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>", kLeft,
                   kTop, kTop + kPlotH);
  s += fmt::format("<line class=\"axis\" x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>", kLeft,
                   kTop + kPlotH, kLeft + kPlotW);
  s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                   kLeft + kPlotW / 2, kH - 8, HtmlEscape(x_label));
  s += fmt::format(
      "<text x=\"14\" y=\"{:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 14 "
      "{:.1f})\">{}</text>",
      kTop + kPlotH / 2, kTop + kPlotH / 2, HtmlEscape(y_label));
  return s;
}

// Characters of 11 px text that fit the legend's column (kRight less the swatch).
constexpr size_t kLegendChars = 20;

bool IsSeparator(char c) { return c == ':' || c == '/' || c == ' ' || c == ',' || c == '='; }

std::string TrimSeparators(std::string s) {
  while (!s.empty() && IsSeparator(s.front())) s.erase(s.begin());
  while (!s.empty() && IsSeparator(s.back())) s.pop_back();
  return s;
}

bool AllDistinct(std::vector<std::string> labels) {
  std::sort(labels.begin(), labels.end());
  return std::adjacent_find(labels.begin(), labels.end()) == labels.end();
}

// The part every name shares at its start and at its end, cut at separators
// ("openai:gpt-5.5 / refine" and "openai:gpt-5.5-mini / refine" share
// "openai:" and " / refine"), taken off when every name keeps something.
std::vector<std::string> WithoutSharedEnds(std::vector<std::string> names) {
  if (names.size() < 2) return names;
  size_t pre = names[0].size(), suf = names[0].size();
  for (const auto& n : names) {
    size_t i = 0;
    while (i < pre && i < n.size() && n[i] == names[0][i]) ++i;
    pre = i;
    size_t j = 0;
    while (j < suf && j < n.size() && n[n.size() - 1 - j] == names[0][names[0].size() - 1 - j]) ++j;
    suf = j;
  }
  while (pre > 0 && !IsSeparator(names[0][pre - 1])) --pre;  // end the prefix at a separator
  const std::string& first = names[0];
  while (suf > 0 && !IsSeparator(first[first.size() - suf])) --suf;  // start the suffix at one
  std::vector<std::string> out;
  for (const auto& n : names) {
    if (pre + suf >= n.size()) return names;
    out.push_back(TrimSeparators(n.substr(pre, n.size() - pre - suf)));
    if (out.back().empty()) return names;
  }
  return out;
}

// Legend labels a reader can tell apart: the names without what they all
// share, cut in the middle to fit the column (the end of a model name is
// what tells "gpt-5.5" from "gpt-5.5-mini"). The legend keeps each full name
// as the item's tooltip. Distinct names always get distinct labels.
std::vector<std::string> LegendLabels(const std::vector<ChartSeries>& series) {
  std::vector<std::string> names;
  for (const auto& s : series) names.push_back(s.name);
  if (!AllDistinct(names)) return names;
  const std::vector<std::string> short_names = WithoutSharedEnds(names);
  for (size_t head : {kLegendChars / 2 - 1, size_t{4}, size_t{0}}) {
    std::vector<std::string> labels;
    for (const auto& n : short_names) {
      if (n.size() <= kLegendChars) {
        labels.push_back(n);
      } else {
        const size_t tail = kLegendChars - 1 - head;
        labels.push_back(n.substr(0, head) + "\u2026" + n.substr(n.size() - tail));
      }
    }
    if (AllDistinct(labels)) return labels;
  }
  return short_names;
}

std::string Legend(const std::vector<ChartSeries>& series) {
  const std::vector<std::string> labels = LegendLabels(series);
  std::string s = "<g class=\"legend\">";
  for (size_t i = 0; i < series.size(); ++i) {
    const double y = kTop + 8 + 18.0 * static_cast<double>(i);
    s += fmt::format("<g class=\"legend-item\"><title>{}</title>", HtmlEscape(series[i].name));
    s += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"12\" height=\"12\" fill=\"{}\"/>",
                     kW - kRight + 12, y - 10, SeriesColour(i));
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\">{}</text></g>", kW - kRight + 30, y,
                     HtmlEscape(labels[i]));
  }
  return s + "</g>";
}

std::string Empty(const std::string& css_class, const std::string& title) {
  return Open(css_class, title) +
         fmt::format("<text class=\"empty\" x=\"{}\" y=\"{}\">no data</text></svg>", kW / 2 - 20,
                     kH / 2);
}

}  // namespace

const char* SeriesColour(size_t i) {
  static constexpr const char* kPalette[] = {"#1b6ac9", "#d9480f", "#2b8a3e", "#862e9c",
                                             "#c2255c", "#087f5b", "#e67700", "#495057"};
  return kPalette[i % (sizeof kPalette / sizeof *kPalette)];
}

std::string LineChart(const std::string& css_class, const std::string& title,
                      const std::string& x_label, const std::string& y_label,
                      const std::vector<ChartSeries>& series) {
  double xlo = 1e300, xhi = -1e300;
  for (const auto& s : series) {
    for (const auto& [x, y] : s.points) xlo = std::min(xlo, x), xhi = std::max(xhi, x);
  }
  if (xlo > xhi) return Empty(css_class, title);
  const Range xr{xlo, xhi}, yr{0, 1};
  std::string svg = Open(css_class, title) + Axes(xr, yr, x_label, y_label, 4, 4);
  for (size_t i = 0; i < series.size(); ++i) {
    std::string pts;
    std::string dots;
    for (const auto& [x, y] : series[i].points) {
      const double px = xr.Map(x, kLeft, kLeft + kPlotW), py = yr.Map(y, kTop + kPlotH, kTop);
      pts += fmt::format("{:.1f},{:.1f} ", px, py);
      dots += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\"><title>{} p={:g}: {:.3f}</title></circle>",
          px, py, HtmlEscape(series[i].name), x, y);
    }
    svg += fmt::format(
        "<g class=\"series\" data-name=\"{}\" fill=\"{}\" stroke=\"{}\">"
        "<polyline fill=\"none\" stroke-width=\"2.5\" points=\"{}\"/>{}</g>",
        HtmlEscape(series[i].name), SeriesColour(i), SeriesColour(i), pts, dots);
  }
  return svg + Legend(series) + "</svg>";
}

std::string SpeedupStrips(const std::string& css_class, const std::string& title,
                          const std::vector<ChartSeries>& series) {
  double lo = 0, hi = 0;  // log2 range always includes 1.0x
  bool any = false;
  for (const auto& s : series) {
    for (const auto& [x, y] : s.points) {
      if (x <= 0) continue;
      lo = std::min(lo, std::log2(x));
      hi = std::max(hi, std::log2(x));
      any = true;
    }
  }
  if (!any) return Empty(css_class, title);
  lo = std::floor(lo * 2) / 2;
  hi = std::ceil(hi * 2) / 2;
  if (hi - lo < 1) hi = lo + 1;
  const Range xr{lo, hi};
  const Range yr{0, static_cast<double>(series.size())};
  std::string svg =
      Open(css_class, title) + Axes(xr, yr, "speedup (log scale)", "", 4, 1, /*x_log2=*/true);
  const double one = xr.Map(0, kLeft, kLeft + kPlotW);
  svg += fmt::format(
      "<line class=\"unity\" x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#444\" "
      "stroke-dasharray=\"4 3\"/>",
      one, kTop, kTop + kPlotH);
  const double lane = kPlotH / std::max<size_t>(series.size(), 1);
  for (size_t i = 0; i < series.size(); ++i) {
    const double cy = kTop + lane * (static_cast<double>(i) + 0.5);
    std::string dots;
    double log_sum = 0;
    int n = 0;
    for (size_t j = 0; j < series[i].points.size(); ++j) {
      const double x = series[i].points[j].first;
      if (x <= 0) continue;
      // A fixed jitter pattern keeps overlapping dots visible and output deterministic.
      const double jitter = (static_cast<double>(j % 7) - 3) * lane / 10;
      dots += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill-opacity=\"0.6\"><title>{:.3f}x</title>"
          "</circle>",
          xr.Map(std::log2(x), kLeft, kLeft + kPlotW), cy + jitter, x);
      log_sum += std::log2(x);
      ++n;
    }
    std::string mean;
    if (n > 0) {
      const double gx = xr.Map(log_sum / n, kLeft, kLeft + kPlotW);
      mean = fmt::format(
          "<rect class=\"geomean\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"4\" height=\"{:.1f}\">"
          "<title>geomean {:.3f}x</title></rect>",
          gx - 2, cy - lane / 3, lane / 1.5, std::exp2(log_sum / n));
    }
    svg += fmt::format("<g class=\"series\" data-name=\"{}\" fill=\"{}\">{}{}</g>",
                       HtmlEscape(series[i].name), SeriesColour(i), dots, mean);
  }
  return svg + Legend(series) + "</svg>";
}

std::string ScatterChart(const std::string& css_class, const std::string& title,
                         const std::string& x_label, const std::string& y_label,
                         const std::vector<ChartSeries>& series) {
  double xhi = 0, yhi = 0;
  bool any = false;
  for (const auto& s : series) {
    for (const auto& [x, y] : s.points) xhi = std::max(xhi, x), yhi = std::max(yhi, y), any = true;
  }
  if (!any) return Empty(css_class, title);
  const Range xr{0, xhi > 0 ? xhi * 1.1 : 1}, yr{0, yhi > 0 ? yhi * 1.1 : 1};
  std::string svg = Open(css_class, title) + Axes(xr, yr, x_label, y_label, 4, 4);
  for (size_t i = 0; i < series.size(); ++i) {
    std::string dots;
    for (const auto& [x, y] : series[i].points) {
      dots += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"6\"><title>{}: {:g} solved, ${:.2f}</title>"
          "</circle>",
          xr.Map(x, kLeft, kLeft + kPlotW), yr.Map(y, kTop + kPlotH, kTop),
          HtmlEscape(series[i].name), x, y);
    }
    svg += fmt::format("<g class=\"series\" data-name=\"{}\" fill=\"{}\">{}</g>",
                       HtmlEscape(series[i].name), SeriesColour(i), dots);
  }
  return svg + Legend(series) + "</svg>";
}

}  // namespace kforge::results
