#include "run/canary_scan.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>

#include "kforge/core/hash.h"
#include "kforge/evaluator/canary.h"

namespace kforge::eval {

bool IsCanaryToken(std::string_view token) {
  if (token.size() != kCanaryPrefix.size() + 32 || !token.starts_with(kCanaryPrefix)) return false;
  return std::all_of(
      token.begin() + static_cast<std::ptrdiff_t>(kCanaryPrefix.size()), token.end(),
      [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f'); });
}

std::vector<std::string> CanaryNeedles(std::string_view canary) {
  if (!IsCanaryToken(canary)) return {};
  std::array<char, 16> raw{};
  if (!HexDecode(canary.substr(kCanaryPrefix.size()), raw.data(), raw.size()).ok()) return {};
  return {std::string(canary), std::string(raw.data(), raw.size())};
}

std::string CanarySighting::Where() const {
  return fmt::format("at byte {}{}", offset, raw ? " (its 16 raw bytes)" : "");
}

std::optional<CanarySighting> FindCanary(std::string_view bytes,
                                         const std::vector<std::string>& needles) {
  std::optional<CanarySighting> first;
  for (size_t k = 0; k < needles.size(); ++k) {
    if (needles[k].empty()) continue;
    const size_t at = bytes.find(needles[k]);
    if (at == std::string_view::npos || (first && first->offset <= at)) continue;
    first = CanarySighting{at, k > 0};
  }
  return first;
}

CanaryStreamScanner::CanaryStreamScanner(std::vector<std::string> needles, uint64_t offset)
    : needles_(std::move(needles)), offset_(offset) {
  for (const auto& n : needles_) keep_ = std::max(keep_, n.empty() ? 0 : n.size() - 1);
}

void CanaryStreamScanner::Feed(std::string_view piece) {
  if (sighting_ || needles_.empty() || piece.empty()) return;
  // The carry (the last bytes fed, one fewer than the longest needle) and
  // the piece as one window: a needle that starts in the carry and ends in
  // the piece is found; one wholly in the carry was found when it was fed.
  std::string window = carry_;
  window.append(piece);
  if (auto s = FindCanary(window, needles_)) {
    s->offset += offset_;
    sighting_ = s;
    return;
  }
  const size_t cut = window.size() > keep_ ? window.size() - keep_ : 0;
  carry_ = window.substr(cut);
  offset_ += cut;
}

}  // namespace kforge::eval
