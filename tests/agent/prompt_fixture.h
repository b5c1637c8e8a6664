// The fixed problem of the prompt tests: task 001_allreduce at W = 8 in bf16,
// with the h100_8 hardware profile, built from the repository's tasks and
// prompts exactly as `kforge prompt` builds it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "kforge/agent/adapters.h"
#include "kforge/agent/hardware_card.h"
#include "kforge/agent/prompt.h"
#include "kforge/agent/strategy.h"
#include "kforge/evaluator/task.h"

namespace kforge::agent::testing {

inline const std::filesystem::path kRoot(KFORGE_SOURCE_ROOT);
constexpr int kWorld = 8;
constexpr const char* kDtype = "bf16";

// The names of prompts/strategies/*.toml, sorted.
inline std::vector<std::string> ShippedStrategies() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(kRoot / "prompts/strategies"))
    if (e.path().extension() == ".toml") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

inline const eval::Task& Allreduce() {
  static const eval::Task task = [] {
    auto t = eval::LoadTask(kRoot / "tasks/001_allreduce");
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? *t : eval::Task{};
  }();
  return task;
}

inline const eval::HardwareCard& HardwareCard() {
  static const eval::HardwareCard card = [] {
    auto c = FindHardwareProfile("h100_8", kRoot / "prompts");
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? c->Trimmed(kWorld) : eval::HardwareCard{};
  }();
  return card;
}

inline Strategy GoldenStrategy(const std::string& name) {
  auto s = FindStrategy(name, kRoot / "prompts");
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : Strategy{};
}

inline Prompt GoldenPrompt(const Strategy& strategy) {
  auto in =
      TaskPromptInputs(Allreduce(), kWorld, kDtype, strategy, RenderHardwareCard(HardwareCard()));
  EXPECT_TRUE(in.ok()) << in.status().ToString();
  if (!in.ok()) return {};
  auto p = BuildPrompt(strategy, *in);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : Prompt{};
}

inline Prompt GoldenPrompt(const std::string& strategy) {
  return GoldenPrompt(GoldenStrategy(strategy));
}

}  // namespace kforge::agent::testing
