// The fixture of the HTTP client tests: a cpp-httplib server on 127.0.0.1
// that speaks each wire format with recorded bodies and injects failures,
// test prices, and a client on a FakeClock so that retries wait no real time.
// Shared by http_client_test.cc (wire formats, retries, errors) and
// http_cache_test.cc (the response cache, record and replay).
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fixtures.h"
#include "kforge/core/fs.h"
#include "kforge/providers/client.h"
#include "kforge/providers/limiter.h"
#include "test_server.h"
#include "transcript.h"

namespace kforge::providers::testing_http {

using testing::ChunksToSse;
using testing::Reply;
using testing::TestServer;
using Json = nlohmann::json;

inline constexpr const char* kKey = "sk-test-0123456789abcdefghij";
inline constexpr const char* kSse = "text/event-stream";

// Test prices, so cost assertions do not depend on the shipped registry.
inline constexpr const char* kRegistry = R"(
[providers.openai]
wire = "openai_chat"
key_env = ["KFORGE_TEST_NO_SUCH_VAR"]
[providers.openai-responses]
wire = "openai_responses"
[providers.anthropic]
wire = "anthropic"
[providers.gemini]
wire = "gemini"
[providers.compat]
wire = "openai_chat"
key_required = false
[models."openai:gpt-test"]
reasoning = "effort"
rejects = ["temperature", "max_tokens"]
price = { input = 2.0, cached_input = 0.5, output = 8.0 }
[models."anthropic:claude-test"]
default_output = 1000
price = { input = 3.0, cached_input = 0.3, cache_write = 3.75, output = 15.0 }
[models."gemini:gemini-test"]
reasoning = "adaptive"
price = { input = 2.0, output = 12.0 }
[models."openai-responses:gpt-test"]
price = { input = 1.0, output = 1.0 }
)";

class HttpClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = MakeTempDir("kforge-providers-test");
    ASSERT_TRUE(dir.ok());
    dir_ = *dir;
    ASSERT_TRUE(WriteFileAtomic(dir_ / "registry.toml", kRegistry).ok());
    options_.registry_paths = {dir_ / "registry.toml"};
    options_.use_builtin_registry = false;
    options_.base_url = server_.url();
    options_.api_key = kKey;
    options_.cache_enabled = false;
    options_.clock = &clock_;
    options_.limiter = std::make_shared<Limiter>(LimiterOptions{}, clock_);
    options_.random = [] { return 0.0; };  // jitter at its floor: half the backoff
    options_.retry.max_attempts = 4;
    options_.idle_timeout = std::chrono::milliseconds(300);
    options_.on_retry = [this](int, const Status& why, std::chrono::milliseconds wait) {
      retries_.push_back(why.kind());
      waits_ms_.push_back(wait.count());
    };
    options_.on_spend = [this](const Usage& u, double cost) {
      spent_usd_ += cost;
      spent_output_ += u.output_tokens;
    };
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  Result<ChatResponse> Ask(const std::string& spec, ChatRequest request = {}) {
    auto client = MakeClient(spec, options_);
    if (!client.ok()) return client.status();
    if (request.messages.empty()) request.messages = {{"user", "hello"}};
    return (*client)->Complete(request, [this](std::string_view d) { streamed_.append(d); });
  }

  TestServer server_;
  FakeClock clock_;
  std::filesystem::path dir_;
  ClientOptions options_;
  std::vector<ErrorKind> retries_;
  std::vector<int64_t> waits_ms_;
  std::string streamed_;
  double spent_usd_ = 0;
  int64_t spent_output_ = 0;
};

inline Reply SseReply(std::string body, size_t piece = 7) {
  Reply r;
  r.content_type = kSse;
  r.body = std::move(body);
  r.piece = piece;
  return r;
}

inline Reply JsonReply(int status, std::string body,
                       std::map<std::string, std::string> headers = {}) {
  Reply r;
  r.status = status;
  r.body = std::move(body);
  r.headers = std::move(headers);
  return r;
}

}  // namespace kforge::providers::testing_http
