// Task folder keys: "001_allreduce" = a number of 1-6 digits, '_', a name in
// [a-z0-9_]. Internal to the task loader and the tasks directory scan.
#pragma once

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace kforge::eval::internal {

inline bool IsTaskName(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// "001_allreduce" → (1, "allreduce"); nullopt unless the name is NNN_name.
inline std::optional<std::pair<int, std::string>> SplitKey(std::string_view key) {
  size_t digits = 0;
  while (digits < key.size() && std::isdigit(static_cast<unsigned char>(key[digits]))) ++digits;
  if (digits == 0 || digits > 6 || digits + 1 >= key.size() || key[digits] != '_')
    return std::nullopt;
  std::string_view name = key.substr(digits + 1);
  if (!IsTaskName(name)) return std::nullopt;
  int number = 0;
  for (size_t i = 0; i < digits; ++i) number = number * 10 + (key[i] - '0');
  return std::make_pair(number, std::string(name));
}

}  // namespace kforge::eval::internal
