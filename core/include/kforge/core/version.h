// What build of kforge this is: written into every run store, every
// kforge.eval/1 document and `kforge --version`, so that a result says which
// code judged it. Defined in a file CMake generates at build time
// (cmake/version.cmake).
#pragma once

#include <string>
#include <string_view>

namespace kforge {

// The project version ("0.1.0").
std::string_view Version();
// The git commit built ("3f2a9c1d0b7e", "-dirty" appended when tracked files
// differed from it), or "unknown" when built outside a git checkout.
std::string_view GitCommit();
// "0.1.0 (3f2a9c1d0b7e)".
inline std::string VersionString() {
  return std::string(Version()) + " (" + std::string(GitCommit()) + ")";
}

}  // namespace kforge
