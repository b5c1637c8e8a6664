// Access to the recorded provider bodies in shared/provider-fixtures.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "kforge/core/fs.h"

namespace kforge::providers::testing {

inline std::filesystem::path FixturesDir() {
  if (const char* env = std::getenv("KFORGE_FIXTURES_DIR"); env && *env) return env;
  return KFORGE_FIXTURES_DIR;
}

// Reads a fixture into `out`; false when the directory or file is absent.
inline bool ReadFixture(const std::string& name, std::string& out) {
  auto text = ReadFile(FixturesDir() / name);
  if (!text.ok()) return false;
  out = std::move(text).value();
  return true;
}

// The vercel/ai capture format: each non-empty line is one `data:` payload.
inline std::string ChunksToSse(const std::string& jsonl) {
  std::string sse;
  size_t start = 0;
  while (start < jsonl.size()) {
    size_t end = jsonl.find('\n', start);
    if (end == std::string::npos) end = jsonl.size();
    std::string line = jsonl.substr(start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
    sse += "data: " + line + "\n\n";
  }
  return sse;
}

}  // namespace kforge::providers::testing

// Declares `var` with the fixture's text, or skips the test naming what is missing.
#define KF_FIXTURE(var, name)                                                                    \
  std::string var;                                                                               \
  if (!::kforge::providers::testing::ReadFixture(name, var)) {                                   \
    GTEST_SKIP() << "fixture " << name << " not found in "                                       \
                 << ::kforge::providers::testing::FixturesDir() << " (set KFORGE_FIXTURES_DIR)"; \
  }
