#include "kforge/agent/prompt.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace kforge::agent {
namespace {

PromptInputs Inputs() {
  PromptInputs in;
  in.task_key = "001_allreduce";
  in.task_title = "All-reduce (sum)";
  in.world = 4;
  in.dtype = "bf16";
  in.task_card = "TASK CARD with { braces } and <kf_ctx>";
  in.hardware_card = "## Hardware\n- 4 x GPU";
  in.example_name = "oneshot.cu";
  in.example_source = "int kf_run(kf_ctx* ctx) { return 0; }";
  return in;
}

TEST(Prompt, UserPromptCarriesTaskAndHardwareVerbatim) {
  auto s = FindStrategy("refine", testing::PromptsDir());
  ASSERT_TRUE(s.ok());
  auto p = BuildPrompt(*s, Inputs());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  // The heading, W and dtype are the task card's: the template adds none of its own.
  EXPECT_EQ(p->user.rfind("TASK CARD with { braces } and <kf_ctx>\n", 0), 0u) << p->user;
  EXPECT_EQ(p->user.find("# Task"), std::string::npos) << p->user;
  EXPECT_EQ(p->user.find("World size"), std::string::npos) << p->user;
  EXPECT_NE(p->user.find("## Hardware\n- 4 x GPU"), std::string::npos);
  EXPECT_NE(p->user.find("up to 4 turns"), std::string::npos);
  // refine has example = false: the solution stays out.
  EXPECT_EQ(p->user.find("oneshot.cu"), std::string::npos);
  // docs/abi.md: kf_run is required, kf_setup and kf_teardown optional.
  EXPECT_NE(p->system.find("kf_run is required; kf_setup (once per shape, untimed) and kf_teardown "
                           "are optional"),
            std::string::npos)
      << p->system;
}

TEST(Prompt, ExampleStrategyIncludesTheSolution) {
  auto s = FindStrategy("refine-example", testing::PromptsDir());
  ASSERT_TRUE(s.ok());
  auto p = BuildPrompt(*s, Inputs());
  ASSERT_TRUE(p.ok());
  EXPECT_NE(p->user.find("(oneshot.cu)"), std::string::npos);
  EXPECT_NE(p->user.find("```cuda\nint kf_run(kf_ctx* ctx) { return 0; }\n```"), std::string::npos)
      << p->user;
}

TEST(Prompt, OneShotSaysNothingAboutTurnsAndSkipsMissingHardware) {
  auto s = FindStrategy("one-shot", testing::PromptsDir());
  ASSERT_TRUE(s.ok());
  PromptInputs in = Inputs();
  in.hardware_card.clear();
  auto p = BuildPrompt(*s, in);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->user.find("turns"), std::string::npos);
  EXPECT_EQ(p->user.find("## Hardware"), std::string::npos);
}

}  // namespace
}  // namespace kforge::agent
