// Landlock, the filesystem/network/signal layer of the sandbox (sandbox.h).
#pragma once

#include <string>
#include <vector>

#include "sandbox/sandbox.h"

namespace kforge::sandbox {

struct LandlockRules {
  std::vector<std::string> read_paths;   // read, list, map and execute beneath
  std::vector<std::string> write_paths;  // also write, create, remove beneath
  bool allow_tcp = false;
  bool allow_abstract_unix = false;
};

// The running kernel's Landlock ABI version; 0 when it has none.
int LandlockAbi();

// Restricts the calling thread and every thread and process it creates after.
// Also sets no_new_privs (Landlock requires it).
Layer ApplyLandlock(const LandlockRules& rules);

}  // namespace kforge::sandbox
