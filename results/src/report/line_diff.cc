#include "report/line_diff.h"

#include <algorithm>
#include <cstdint>

#include "web/html.h"

namespace kforge::results {

namespace {

std::vector<std::string_view> SplitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// Which lines of `diff` to print: changes plus `context` lines around them.
std::vector<bool> Visible(const std::vector<DiffLine>& diff, int context) {
  std::vector<bool> show(diff.size(), false);
  const int n = static_cast<int>(diff.size());
  for (int i = 0; i < n; ++i) {
    if (diff[i].kind == DiffLine::Kind::kSame) continue;
    for (int j = std::max(0, i - context); j <= std::min(n - 1, i + context); ++j) show[j] = true;
  }
  return show;
}

}  // namespace

std::vector<DiffLine> DiffLines(std::string_view before, std::string_view after) {
  const auto a = SplitLines(before), b = SplitLines(after);
  const size_t n = a.size(), m = b.size();
  std::vector<DiffLine> out;
  if (n > 4000 || m > 4000) {
    for (auto l : a) out.push_back({DiffLine::Kind::kRemoved, std::string(l)});
    for (auto l : b) out.push_back({DiffLine::Kind::kAdded, std::string(l)});
    return out;
  }
  // lcs[i][j]: LCS length of a[i..] and b[j..].
  std::vector<std::vector<uint16_t>> lcs(n + 1, std::vector<uint16_t>(m + 1, 0));
  for (size_t i = n; i-- > 0;) {
    for (size_t j = m; j-- > 0;) {
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) {
      out.push_back({DiffLine::Kind::kSame, std::string(a[i])});
      ++i, ++j;
    } else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) {
      // Removed lines before added ones, as every diff tool prints a change.
      out.push_back({DiffLine::Kind::kRemoved, std::string(a[i++])});
    } else {
      out.push_back({DiffLine::Kind::kAdded, std::string(b[j++])});
    }
  }
  return out;
}

std::string UnifiedDiff(const std::vector<DiffLine>& diff, int context) {
  const auto show = Visible(diff, context);
  std::string out;
  if (std::find(show.begin(), show.end(), true) == show.end()) return out;  // no differences
  bool folded = false;
  for (size_t i = 0; i < diff.size(); ++i) {
    if (!show[i]) {
      if (!folded) out += "  …\n";
      folded = true;
      continue;
    }
    folded = false;
    const char* mark = diff[i].kind == DiffLine::Kind::kAdded     ? "+ "
                       : diff[i].kind == DiffLine::Kind::kRemoved ? "- "
                                                                  : "  ";
    out += mark + diff[i].text + "\n";
  }
  return out;
}

std::string DiffHtml(const std::vector<DiffLine>& diff, int context) {
  const auto show = Visible(diff, context);
  std::string out = "<pre class=\"diff\">";
  bool folded = false;
  for (size_t i = 0; i < diff.size(); ++i) {
    if (!show[i]) {
      if (!folded) out += "<span class=\"ctx\">  …</span>";
      folded = true;
      continue;
    }
    folded = false;
    switch (diff[i].kind) {
      case DiffLine::Kind::kAdded:
        out += "<span class=\"add\">+ ";
        break;
      case DiffLine::Kind::kRemoved:
        out += "<span class=\"del\">- ";
        break;
      case DiffLine::Kind::kSame:
        out += "<span class=\"ctx\">  ";
        break;
    }
    out += HtmlEscape(diff[i].text) + "</span>";
  }
  return out + "</pre>";
}

}  // namespace kforge::results
