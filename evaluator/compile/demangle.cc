#include "demangle.h"

#include <cxxabi.h>

#include <cstdlib>

namespace kforge::eval {

std::string Demangle(std::string_view mangled) {
  if (mangled.size() > kMaxDemangled || !mangled.starts_with("_Z")) return std::string(mangled);
  const std::string name(mangled);
  int status = 0;
  char* plain = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && plain != nullptr ? plain : name;
  std::free(plain);
  return out;
}

}  // namespace kforge::eval
