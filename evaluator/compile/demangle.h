// C++ symbol names as the source spells them.
#pragma once

#include <string>
#include <string_view>

namespace kforge::eval {

// The demangled form of `mangled`, or `mangled` itself when it is no valid
// mangled name. Names come from candidates' sources (through ptxas and the
// linker), so names longer than kMaxDemangled are left as they are: the
// demangler recurses with a name's nesting.
std::string Demangle(std::string_view mangled);

inline constexpr size_t kMaxDemangled = 2048;

}  // namespace kforge::eval
