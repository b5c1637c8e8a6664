// Shared helpers for the agent tests: strategies over the shipped templates.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "kforge/agent/strategy.h"

namespace kforge::agent::testing {

inline std::filesystem::path PromptsDir() {
  return std::filesystem::path(KFORGE_SOURCE_ROOT) / "prompts";
}

// A strategy from TOML text, with the shipped templates.
inline Strategy MakeStrategy(const std::string& toml) {
  auto s = ParseStrategy(toml, "test.toml", PromptsDir() / "templates");
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : Strategy{};
}

}  // namespace kforge::agent::testing
