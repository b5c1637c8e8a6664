// Building blocks for hand-written scanners of outside text (model replies,
// kernel sources, compiler logs, provider error bodies).
//
// Why not std::regex: libstdc++'s matcher recurses once per character a
// repetition consumes, so a pattern like "[^;]*" or ".*" overflows the stack on
// an input of a few tens of kilobytes, and backtracking makes some patterns
// quadratic. Scanners built from these helpers read each character a bounded
// number of times and use no recursion. ASCII only, like the "C" locale.
#pragma once

#include <cstddef>
#include <string_view>

namespace kforge::scan {

// ECMAScript \s on ASCII: space, \t, \n, \v, \f, \r.
constexpr bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}
constexpr bool IsDigit(char c) { return c >= '0' && c <= '9'; }
constexpr bool IsUpper(char c) { return c >= 'A' && c <= 'Z'; }
constexpr bool IsLower(char c) { return c >= 'a' && c <= 'z'; }
constexpr bool IsAlpha(char c) { return IsUpper(c) || IsLower(c); }
constexpr bool IsAlnum(char c) { return IsAlpha(c) || IsDigit(c); }
// ECMAScript \w: [A-Za-z0-9_].
constexpr bool IsWordChar(char c) { return IsAlnum(c) || c == '_'; }
constexpr char ToLower(char c) { return IsUpper(c) ? static_cast<char>(c - 'A' + 'a') : c; }

// The first index at or after `from` whose character fails `pred` (s.size() if none).
template <typename Pred>
constexpr size_t SkipWhile(std::string_view s, size_t from, Pred pred) {
  while (from < s.size() && pred(s[from])) ++from;
  return from;
}

// Whether `s` holds `word` at `at`.
constexpr bool At(std::string_view s, size_t at, std::string_view word) {
  return at <= s.size() && s.substr(at).starts_with(word);
}

// Whether `s` holds `word` at `at`, ignoring ASCII case.
constexpr bool AtIgnoreCase(std::string_view s, size_t at, std::string_view word) {
  if (at > s.size() || s.size() - at < word.size()) return false;
  for (size_t i = 0; i < word.size(); ++i) {
    if (ToLower(s[at + i]) != ToLower(word[i])) return false;
  }
  return true;
}

// The first index at or after `from` where `s` holds `word` ignoring ASCII
// case, or npos. O(size * word.size()); meant for short words.
constexpr size_t FindIgnoreCase(std::string_view s, std::string_view word, size_t from = 0) {
  for (size_t at = from; at <= s.size() && s.size() - at >= word.size(); ++at) {
    if (AtIgnoreCase(s, at, word)) return at;
  }
  return std::string_view::npos;
}

}  // namespace kforge::scan
