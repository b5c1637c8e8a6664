#include "kforge/agent/strategy.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace kforge::agent {
namespace {

using testing::PromptsDir;

Status Parse(const std::string& text) {
  return ParseStrategy(text, "s.toml", PromptsDir() / "templates").status();
}

TEST(Strategy, ShippedStrategiesLoad) {
  std::vector<std::string> names = ListStrategies(PromptsDir());
  for (const char* want : {"one-shot", "best-of-n", "refine", "tree", "refine-example"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  for (const auto& n : names) {
    auto s = FindStrategy(n, PromptsDir());
    ASSERT_TRUE(s.ok()) << n << ": " << s.status().ToString();
    EXPECT_EQ(s->feedback_templates.size(), std::size(kAllOutcomes)) << n;
    EXPECT_FALSE(s->system_template.empty());
  }
  auto tree = FindStrategy("tree", PromptsDir());
  EXPECT_EQ(tree->refine, RefineFrom::kBeam);
  EXPECT_EQ(tree->beam, 2);
  EXPECT_EQ(tree->samples, 4);
  EXPECT_TRUE(FindStrategy("refine-example", PromptsDir())->example);
}

// Budgets reserve each call's worst case, output cap included: a shipped
// strategy without a cap reserved a 128K-output model's whole 128K tokens
// per call, so a small budget made no call at all.
TEST(Strategy, ShippedStrategiesCapTheOutput) {
  for (const auto& n : ListStrategies(PromptsDir())) {
    auto s = FindStrategy(n, PromptsDir());
    ASSERT_TRUE(s.ok()) << n << ": " << s.status().ToString();
    EXPECT_EQ(s->max_output_tokens, std::optional<int>(16384)) << n;
  }
}

TEST(Strategy, ErrorsNameFileLineAndField) {
  Status st = Parse("turns = 3\nsamples = \"four\"\n");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "s.toml:2: samples: expected an integer");
  st = Parse("turns = 3\n\n[stop]\nspeedup = -1.0\n");
  EXPECT_EQ(st.message(), "s.toml:4: stop.speedup: must not be negative");
  st = Parse("refine = \"sideways\"\n");
  EXPECT_EQ(st.message(), "s.toml:1: refine: expected \"last\", \"best\" or \"beam\"");
  st = Parse("turns = 0\n");
  EXPECT_EQ(st.message(), "s.toml:1: turns: must be at least 1");
}

// `profile = true` asks every GPU evaluation for the profile; off unless set,
// and only a boolean.
TEST(Strategy, ProfileIsABooleanOffByDefault) {
  auto plain = ParseStrategy("turns = 2\n", "s.toml", PromptsDir() / "templates");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE(plain->profile);
  auto on = ParseStrategy("turns = 2\nprofile = true\n", "s.toml", PromptsDir() / "templates");
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE(on->profile);
  EXPECT_EQ(Parse("turns = 2\n\nprofile = \"yes\"\n").message(),
            "s.toml:3: profile: expected true or false");
  EXPECT_EQ(Parse("profile = 1\n").message(), "s.toml:1: profile: expected true or false");
  // Every switch alike: toml++ would read 1 as true.
  EXPECT_EQ(Parse("[stop]\non_correct = 1\n").message(),
            "s.toml:2: stop.on_correct: expected true or false");
  for (const auto& n : ListStrategies(PromptsDir())) {
    EXPECT_FALSE(FindStrategy(n, PromptsDir())->profile) << n << ": profiling costs GPU time";
  }
}

TEST(Strategy, UnknownFieldsAreRejected) {
  Status st = Parse("turns = 2\n[stop]\nspeed = 2.0\n");
  EXPECT_EQ(st.message(), "s.toml:3: stop.speed: unknown field");
  st = Parse("tunrs = 2\n");
  EXPECT_EQ(st.message(), "s.toml:1: tunrs: unknown field");
}

TEST(Strategy, TomlSyntaxErrorsCarryTheLine) {
  Status st = Parse("turns = 2\nsamples = [\n");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("s.toml:", 0), 0u) << st.message();
}

TEST(Strategy, MissingTemplateFileIsReported) {
  Status st = Parse("[templates]\nmismatch = \"nope.mustache\"\n");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("s.toml:2: templates.mismatch: cannot read template"),
            std::string::npos)
      << st.message();
}

TEST(Strategy, UnknownNameListsTheKnownOnes) {
  auto s = FindStrategy("nonexistent", PromptsDir());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("refine"), std::string::npos);
}

}  // namespace
}  // namespace kforge::agent
