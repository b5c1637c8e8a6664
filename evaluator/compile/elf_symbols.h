// Reading a shared object's dynamic symbol table and dependencies straight
// from its ELF headers (64-bit little-endian only), so that policy and link
// checks need no external tool (nm, readelf) on the evaluation host.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::eval {

struct ElfSymbol {
  std::string name;  // as stored (C++ names stay mangled; versions are not appended)
  bool function = false;
  bool weak = false;
};

struct DynamicInfo {
  // Non-weak and weak references the dynamic loader must resolve at load time.
  std::vector<ElfSymbol> undefined;
  // Global or weak, default or protected visibility, defined in this object.
  std::vector<ElfSymbol> exported;
  std::vector<std::string> needed;   // DT_NEEDED, in order
  std::vector<std::string> runpath;  // DT_RUNPATH or DT_RPATH entries, $ORIGIN expanded
};

// Reads `path`'s .dynsym and .dynamic. Errors: kNotFound (no file), kInvalidInput
// (not a 64-bit little-endian ELF, or truncated / inconsistent headers).
Result<DynamicInfo> ReadDynamicInfo(const std::filesystem::path& path);

}  // namespace kforge::eval
