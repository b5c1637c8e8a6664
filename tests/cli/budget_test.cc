// Budgets as a user meets them through `kforge run`, against a scripted
// OpenAI-compatible server priced by a registry file.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "../providers/test_server.h"
#include "cli_fixture.h"
#include "kforge/core/fs.h"

namespace kforge {
namespace {

namespace fs = std::filesystem;

// A model that may write 128K tokens at $10 per million: uncapped, one
// call's worst case is $1.28. The shipped strategies cap a reply at 16384
// tokens ($0.16), so a $0.50 budget makes its call, and the request says the cap.
TEST_F(CliTest, ASmallBudgetMakesItsCallUnderAShippedStrategy) {
  providers::testing::TestServer server;
  providers::testing::Reply reply;
  reply.body = R"({"id":"c1","object":"chat.completion","model":"big",
    "choices":[{"index":0,"message":{"role":"assistant","content":"No kernel today."},
    "finish_reason":"stop"}],"usage":{"prompt_tokens":3000,"completion_tokens":500}})";
  server.SetDefault(reply);
  ASSERT_TRUE(WriteFileAtomic(tmp_ / "reg.toml", R"(
[providers.bigbox]
wire = "openai_chat"
base_url = ")" + server.url() + R"(/v1"
key_required = false

[models."bigbox:big"]
max_output = 128000
price = { input = 1.0, output = 10.0 }
)")
                  .ok());
  auto r =
      Kforge({"run", "--models", "bigbox:big", "--tasks", "1", "--strategy", "one-shot",
              "--compile-only", "--budget-usd", "0.5", "--registry", (tmp_ / "reg.toml").string(),
              "--name", "small", "--out", (tmp_ / "runs").string(), "--no-cache"},
             {{"XDG_CONFIG_HOME", (tmp_ / "none").string()}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(server.count(), 1u) << "the budget turned the call away:\n" << r.err;
  const std::string body = server.received().front().body;
  EXPECT_NE(body.find("16384"), std::string::npos) << body;
}

}  // namespace
}  // namespace kforge
