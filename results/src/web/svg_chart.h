// Inline SVG charts drawn by kforge (no chart library, no script): each
// returns one <svg> element with a class naming the chart, one <g
// class="series"> per series and a legend, so pages and tests can find them.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kforge::results {

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y)
};

// Lines with markers: fast_p (y, 0..1) against p (x).
std::string LineChart(const std::string& css_class, const std::string& title,
                      const std::string& x_label, const std::string& y_label,
                      const std::vector<ChartSeries>& series);

// Per series, one horizontal strip of dots (x = log2 speedup) with a marker at
// the geometric mean; a dashed line marks 1.0x.
std::string SpeedupStrips(const std::string& css_class, const std::string& title,
                          const std::vector<ChartSeries>& series);

// One labelled dot per series: x = problems solved, y = dollars spent.
std::string ScatterChart(const std::string& css_class, const std::string& title,
                         const std::string& x_label, const std::string& y_label,
                         const std::vector<ChartSeries>& series);

// The colour of series i (shared by charts and legends).
const char* SeriesColour(size_t i);

}  // namespace kforge::results
