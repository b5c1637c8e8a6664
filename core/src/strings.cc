#include "kforge/core/strings.h"

#include "kforge/core/scan.h"

namespace kforge {

std::string_view TrimView(std::string_view s) {
  while (!s.empty() && scan::IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && scan::IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

std::string Trim(std::string_view s) { return std::string(TrimView(s)); }

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = s.find(sep, pos);
    if (end == std::string_view::npos) end = s.size();
    if (end > pos) out.emplace_back(s.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

}  // namespace kforge
