// Live checks against the real APIs: run only with KFORGE_LIVE_TESTS=1 and
// the provider's key set. Each asks for a few tokens (fractions of a cent).
#include <gtest/gtest.h>

#include <cstdlib>

#include "kforge/providers/client.h"

namespace kforge::providers {
namespace {

void LiveCheck(const char* key_var, const char* spec) {
  const char* live = std::getenv("KFORGE_LIVE_TESTS");
  if (!live || std::string(live) != "1")
    GTEST_SKIP() << "set KFORGE_LIVE_TESTS=1 to run live checks";
  if (!std::getenv(key_var)) GTEST_SKIP() << key_var << " is not set";
  ClientOptions options;
  options.cache_enabled = false;
  options.retry.max_attempts = 2;
  auto client = MakeClient(spec, options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ChatRequest req;
  req.messages = {{"user", "Reply with the single word: pong"}};
  req.max_output_tokens = 2000;
  req.reasoning_effort = "low";
  auto resp = (*client)->Complete(req);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_FALSE(resp->text.empty());
  EXPECT_GT(resp->usage.input_tokens, 0);
  EXPECT_GT(resp->usage.output_tokens, 0);
}

TEST(LiveTest, OpenAi) { LiveCheck("OPENAI_API_KEY", "openai:gpt-5-mini"); }
TEST(LiveTest, Anthropic) { LiveCheck("ANTHROPIC_API_KEY", "anthropic:claude-haiku-4-5"); }
TEST(LiveTest, Gemini) { LiveCheck("GEMINI_API_KEY", "gemini:gemini-2.5-flash"); }

}  // namespace
}  // namespace kforge::providers
