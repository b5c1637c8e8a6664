// Small string helpers shared by every module (one copy each).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kforge {

// `s` without leading and trailing ASCII whitespace (space, \t, \n, \v, \f, \r).
std::string_view TrimView(std::string_view s);
std::string Trim(std::string_view s);

// The non-empty pieces of `s` between `sep`s: "a,,b," -> {"a", "b"}. Pieces are
// not trimmed.
std::vector<std::string> Split(std::string_view s, char sep);

}  // namespace kforge
