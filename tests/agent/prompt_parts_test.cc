// The first prompt of every shipped strategy, built from the repository's task,
// templates and a hardware profile as `kforge prompt` builds it: each part of
// it appears once.
#include <gtest/gtest.h>

#include "kforge/agent/adapters.h"
#include "kforge/agent/hardware_card.h"
#include "kforge/agent/prompt.h"
#include "kforge/evaluator/task.h"
#include "prompt_fixture.h"

namespace kforge::agent {
namespace {

size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(PromptParts, EachPartOfTheFirstPromptAppearsOnce) {
  for (const std::string& name : testing::ShippedStrategies()) {
    SCOPED_TRACE(name);
    Prompt p = testing::GoldenPrompt(name);
    for (const char* part : {"# Task 001_allreduce: All-reduce (sum)", "World size", "W = 8 ranks",
                             "lement type", "T = bf16 (2 bytes", "## Hardware", "## The kernel ABI",
                             "## The baseline", "## What to send"}) {
      EXPECT_EQ(Count(p.user, part), 1u) << part << "\n" << p.user;
    }
    // docs/abi.md: kf_run is required, kf_setup and kf_teardown optional.
    for (const std::string* text : {&p.system, &p.user}) {
      EXPECT_EQ(text->find("kf_setup, kf_run and kf_teardown"), std::string::npos) << *text;
      EXPECT_EQ(text->find("defines `kf_setup`, `kf_run` and `kf_teardown`"), std::string::npos)
          << *text;
    }
    EXPECT_NE(p.system.find("kf_run is required"), std::string::npos) << p.system;
    EXPECT_NE(p.user.find("`kf_run` (required)"), std::string::npos) << p.user;
    // Parts are separated by one blank line, never more.
    EXPECT_EQ(p.user.find("\n\n\n"), std::string::npos) << p.user;
    EXPECT_EQ(p.system.find("\n\n\n"), std::string::npos) << p.system;
    EXPECT_EQ(p.user.find("\n\n```\n"), std::string::npos) << "a blank line ends a code block";
  }
}

}  // namespace
}  // namespace kforge::agent
