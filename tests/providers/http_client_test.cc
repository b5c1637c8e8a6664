// End to end over real HTTP: wire formats, retries and errors against the
// local test server of http_client_fixture.h.
#include "http_client_fixture.h"

namespace kforge::providers {
namespace {

using namespace testing_http;  // NOLINT: the fixture's names, as if declared here

TEST_F(HttpClientTest, OpenAiChatStreamsAndPrices) {
  KF_FIXTURE(body, "openai_chat_stream_ok.sse");
  Reply r = SseReply(body);
  r.headers["x-request-id"] = "req_abc";
  server_.Push(r);
  ChatRequest req;
  req.system = "You write CUDA kernels.";
  req.temperature = 0.5;  // rejected by this model: must not be sent
  req.max_output_tokens = 100;
  req.reasoning_effort = "high";
  auto resp = Ask("openai:gpt-test", req);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->text.rfind("I'm unable to provide real-time weather updates.", 0), 0u);
  EXPECT_EQ(streamed_, resp->text);
  EXPECT_EQ(resp->usage.input_tokens, 14);
  EXPECT_EQ(resp->usage.output_tokens, 30);
  EXPECT_NEAR(resp->cost_usd, (14 * 2.0 + 30 * 8.0) / 1e6, 1e-12);
  EXPECT_TRUE(resp->cost_known);
  EXPECT_EQ(resp->request_id, "req_abc");
  EXPECT_EQ(resp->attempts, 1);
  auto got = server_.received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].path, "/chat/completions");
  EXPECT_EQ(got[0].headers.find("Authorization")->second, std::string("Bearer ") + kKey);
  Json sent = Json::parse(got[0].body);
  EXPECT_EQ(sent["model"], "gpt-test");
  EXPECT_FALSE(sent.contains("temperature"));
  EXPECT_FALSE(sent.contains("max_tokens"));
  EXPECT_EQ(sent["max_completion_tokens"], 100);
  EXPECT_EQ(sent["reasoning_effort"], "high");
  EXPECT_EQ(sent["messages"][0]["role"], "system");
  EXPECT_EQ(sent["stream_options"]["include_usage"], true);
}

TEST_F(HttpClientTest, AnthropicStream) {
  KF_FIXTURE(body, "anthropic_stream_ok.sse");
  server_.Push(SseReply(body, 5));
  auto resp = Ask("anthropic:claude-test");
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->text, "[12345,67890]");
  EXPECT_EQ(resp->usage.input_tokens, 135);
  EXPECT_EQ(resp->usage.output_tokens, 10);
  EXPECT_NEAR(resp->cost_usd, (135 * 3.0 + 10 * 15.0) / 1e6, 1e-12);
  auto got = server_.received();
  EXPECT_EQ(got[0].path, "/v1/messages");
  EXPECT_EQ(got[0].headers.find("x-api-key")->second, kKey);
  EXPECT_EQ(got[0].headers.find("anthropic-version")->second, "2023-06-01");
  EXPECT_EQ(Json::parse(got[0].body)["max_tokens"], 1000);  // required: the registry default
}

TEST_F(HttpClientTest, GeminiSseStream) {
  KF_FIXTURE(chunks, "gemini_stream.chunks.jsonl");
  server_.Push(SseReply(ChunksToSse(chunks), 11));
  ChatRequest req;
  req.reasoning_effort = "high";
  req.thinking_budget_tokens = 2048;  // an adaptive model: only thinkingLevel may go out
  auto resp = Ask("gemini:gemini-test", req);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->text, "There are **3** \"r\"s in strawberry.\n\nst**r**awbe**rr**y");
  EXPECT_EQ(resp->usage.output_tokens, 208);
  EXPECT_NEAR(resp->cost_usd, (9 * 2.0 + 208 * 12.0) / 1e6, 1e-12);
  auto got = server_.received();
  EXPECT_EQ(got[0].path, "/v1beta/models/gemini-test:streamGenerateContent?alt=sse");
  EXPECT_EQ(got[0].headers.find("x-goog-api-key")->second, kKey);
  Json tc = Json::parse(got[0].body)["generationConfig"]["thinkingConfig"];
  EXPECT_EQ(tc["thinkingLevel"], "HIGH");
  EXPECT_FALSE(tc.contains("thinkingBudget"));
}

TEST_F(HttpClientTest, GeminiArrayBodyOnAStreamingRequest) {
  KF_FIXTURE(body, "gemini_stream_array.json");
  server_.Push(JsonReply(200, body));
  auto resp = Ask("gemini:gemini-test");
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->text, "Hello! How can I help you today?");
  EXPECT_EQ(streamed_, resp->text);
}

TEST_F(HttpClientTest, ResponsesNonStreaming) {
  KF_FIXTURE(body, "openai_responses_ok.json");
  server_.Push(JsonReply(200, body));
  ChatRequest req;
  req.stream = false;
  req.stop = {"END"};  // the Responses API has no stop sequences
  auto resp = Ask("openai-responses:gpt-test", req);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->usage.output_tokens, 50);
  Json sent = Json::parse(server_.received()[0].body);
  EXPECT_EQ(server_.received()[0].path, "/responses");
  EXPECT_EQ(sent["store"], false);
  EXPECT_FALSE(sent.contains("stop"));
  EXPECT_FALSE(sent.contains("stream"));
}

TEST_F(HttpClientTest, CompatServerWithoutKey) {
  KF_FIXTURE(body, "llamacpp_chat_ok.json");
  server_.Push(JsonReply(200, body));  // llama.cpp may answer a stream request with plain JSON
  options_.base_url.clear();
  options_.api_key.clear();
  ChatRequest req;
  req.max_output_tokens = 64;
  auto resp = Ask("compat:" + server_.url() + "/v1#gpt-oss-20b", req);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->reasoning, "Need friendly greeting.");
  EXPECT_EQ(resp->usage.cached_input_tokens, 60);
  EXPECT_FALSE(resp->cost_known);
  EXPECT_FALSE(resp->Billed().priced) << "no price: the cost is unknown, not zero";
  EXPECT_EQ(resp->Billed().cached_input_tokens, 60);
  auto got = server_.received();
  EXPECT_EQ(got[0].path, "/v1/chat/completions");
  EXPECT_EQ(got[0].headers.count("Authorization"), 0u);
  Json sent = Json::parse(got[0].body);
  EXPECT_EQ(sent["model"], "gpt-oss-20b");
  EXPECT_EQ(sent["max_tokens"], 64);
}

TEST_F(HttpClientTest, RateLimitHonoursRetryAfter) {
  KF_FIXTURE(err, "anthropic_429_rate_limit.json");
  KF_FIXTURE(ok, "anthropic_stream_ok.sse");
  server_.Push(JsonReply(429, err, {{"retry-after", "7"}, {"x-should-retry", "true"}}));
  server_.Push(SseReply(ok));
  auto resp = Ask("anthropic:claude-test");
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->attempts, 2);
  EXPECT_EQ(retries_, std::vector<ErrorKind>{ErrorKind::kRateLimited});
  EXPECT_EQ(waits_ms_, std::vector<int64_t>{7000});
  EXPECT_NEAR(resp->latency_s, 7.0, 0.05);  // the fake clock slept exactly the server's delay
  EXPECT_EQ(server_.count(), 2u);
}

TEST_F(HttpClientTest, OverloadedAndServerErrorsBackOff) {
  KF_FIXTURE(overloaded, "anthropic_overloaded_529.json");
  KF_FIXTURE(ok, "anthropic_stream_ok.sse");
  server_.Push(JsonReply(529, overloaded, {{"x-should-retry", "true"}}));
  server_.Push(JsonReply(
      500, R"({"type":"error","error":{"type":"api_error","message":"Internal server error"}})"));
  server_.Push(JsonReply(503, "upstream connect error"));
  server_.Push(SseReply(ok));
  auto resp = Ask("anthropic:claude-test");
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->attempts, 4);
  EXPECT_EQ(retries_, (std::vector<ErrorKind>{ErrorKind::kOverloaded, ErrorKind::kServerError,
                                              ErrorKind::kOverloaded}));
  // Backoff at the jitter floor: overload 2 s * 0.5; 5xx 2 s * 0.5; overload 8 s * 0.5.
  EXPECT_EQ(waits_ms_, (std::vector<int64_t>{1000, 1000, 4000}));
  EXPECT_EQ(clock_.Elapsed(), std::chrono::milliseconds(6000));
}

TEST_F(HttpClientTest, GivesUpAfterMaxAttempts) {
  KF_FIXTURE(unavailable, "gemini_503_unavailable.json");
  for (int i = 0; i < 4; ++i) server_.Push(JsonReply(503, unavailable));
  auto resp = Ask("gemini:gemini-test");
  ASSERT_FALSE(resp.ok());
  EXPECT_EQ(resp.status().kind(), ErrorKind::kOverloaded);
  EXPECT_NE(resp.status().message().find("gave up after 4 attempts"), std::string::npos);
  EXPECT_NE(resp.status().message().find("The model is overloaded"), std::string::npos);
  EXPECT_EQ(server_.count(), 4u);
}

TEST_F(HttpClientTest, GeminiRetryInfo) {
  KF_FIXTURE(err, "gemini_429_resource_exhausted.json");
  KF_FIXTURE(ok, "gemini_ok.json");
  server_.Push(JsonReply(429, err));
  server_.Push(JsonReply(200, ok));
  auto resp = Ask("gemini:gemini-test");
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(waits_ms_, std::vector<int64_t>{34400});
}

TEST_F(HttpClientTest, QuotaStopsAtOnceWithTheProviderMessage) {
  KF_FIXTURE(err, "openai_429_insufficient_quota.json");
  server_.Push(JsonReply(429, err, {{"x-should-retry", "true"}}));
  auto resp = Ask("openai:gpt-test");
  ASSERT_FALSE(resp.ok());
  EXPECT_EQ(resp.status().kind(), ErrorKind::kQuota);
  EXPECT_NE(resp.status().message().find("You exceeded your current quota"), std::string::npos);
  EXPECT_EQ(server_.count(), 1u);
  EXPECT_TRUE(retries_.empty());
}

TEST_F(HttpClientTest, InvalidRequestAndContextOverflowAreFinal) {
  KF_FIXTURE(temp, "openai_400_unsupported_temperature.json");
  KF_FIXTURE(ctx, "llamacpp_400_exceed_context.json");
  server_.Push(JsonReply(400, temp));
  auto a = Ask("openai:gpt-test");
  EXPECT_EQ(a.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(a.status().message().find("'temperature' is not supported"), std::string::npos);
  server_.Push(JsonReply(400, ctx));
  auto b = Ask("openai:gpt-test");
  EXPECT_EQ(b.status().kind(), ErrorKind::kContextOverflow);
  EXPECT_EQ(server_.count(), 2u);
}

TEST_F(HttpClientTest, AuthErrorIsRedacted) {
  server_.Push(
      JsonReply(401, std::string(R"({"error":{"message":"Incorrect API key provided: )") + kKey +
                         R"(.","type":"invalid_request_error","code":"invalid_api_key"}})"));
  auto resp = Ask("openai:gpt-test");
  ASSERT_FALSE(resp.ok());
  EXPECT_EQ(resp.status().kind(), ErrorKind::kAuth);
  EXPECT_EQ(resp.status().message().find(kKey), std::string::npos) << resp.status().message();
  EXPECT_NE(resp.status().message().find("[redacted]"), std::string::npos);
}

TEST_F(HttpClientTest, ConnectionResetMidStreamIsRetried) {
  KF_FIXTURE(ok, "openai_chat_stream_ok.sse");
  Reply cut = SseReply(ok);
  cut.cut_after = 900;
  server_.Push(cut);
  server_.Push(SseReply(ok));
  auto resp = Ask("openai:gpt-test");
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(retries_, std::vector<ErrorKind>{ErrorKind::kTransport});
  EXPECT_EQ(resp->attempts, 2);
  // The failed attempt's deltas were delivered too; the text is the second attempt's alone.
  EXPECT_EQ(streamed_.substr(streamed_.size() - resp->text.size()), resp->text);
  EXPECT_GT(streamed_.size(), resp->text.size());
}

TEST_F(HttpClientTest, StalledStreamTimesOutAndIsRetried) {
  KF_FIXTURE(ok, "anthropic_stream_ok.sse");
  Reply stall = SseReply(ok);
  stall.stall_after = 400;
  server_.Push(stall);
  server_.Push(SseReply(ok));
  auto resp = Ask("anthropic:claude-test");
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(retries_, std::vector<ErrorKind>{ErrorKind::kTimeout});
}

TEST_F(HttpClientTest, StreamCutInsideAnEventIsATransportFailure) {
  KF_FIXTURE(ok, "anthropic_stream_ok.sse");
  size_t mid = ok.find("message_delta") + 20;  // inside the event, before message_stop
  options_.retry.max_attempts = 2;
  server_.Push(SseReply(ok.substr(0, mid)));
  server_.Push(SseReply(ok.substr(0, mid)));
  auto resp = Ask("anthropic:claude-test");
  ASSERT_FALSE(resp.ok());
  EXPECT_EQ(resp.status().kind(), ErrorKind::kTransport);
  EXPECT_NE(resp.status().message().find("ended before its final event"), std::string::npos);
  EXPECT_EQ(server_.count(), 2u);
}

TEST_F(HttpClientTest, ErrorEventInsideA200Stream) {
  KF_FIXTURE(ok, "anthropic_stream_ok.sse");
  std::string head = ok.substr(0, ok.find("event: content_block_stop"));
  server_.Push(
      SseReply(head +
               "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
               "\"message\":\"Overloaded\"}}\n\n"));
  server_.Push(SseReply(ok));
  auto resp = Ask("anthropic:claude-test");
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(retries_, std::vector<ErrorKind>{ErrorKind::kOverloaded});
  EXPECT_EQ(resp->text, "[12345,67890]");
}

TEST_F(HttpClientTest, ResponsesStreamFailureAfter200IsFinalQuota) {
  KF_FIXTURE(chunks, "openai_responses_stream_error.chunks.jsonl");
  server_.Push(SseReply(ChunksToSse(chunks)));
  auto resp = Ask("openai-responses:gpt-test");
  ASSERT_FALSE(resp.ok());
  EXPECT_EQ(resp.status().kind(), ErrorKind::kQuota);
  EXPECT_EQ(server_.count(), 1u);
}

TEST_F(HttpClientTest, MalformedJsonIsRetriedThenReported) {
  KF_FIXTURE(ok, "openai_chat_ok.json");
  server_.Push(JsonReply(200, "{\"id\": \"chatcmpl-x\", \"choices\": [{"));
  server_.Push(JsonReply(200, ok));
  ChatRequest req;
  req.stream = false;
  auto resp = Ask("openai:gpt-test", req);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(retries_, std::vector<ErrorKind>{ErrorKind::kServerError});
  EXPECT_EQ(resp->usage.output_tokens, 37);
}

TEST_F(HttpClientTest, EmptyAnswerTruncatedAtTheOutputLimit) {
  server_.Push(JsonReply(200, R"({"id":"chatcmpl-t","model":"gpt-test","choices":[{"index":0,
      "message":{"role":"assistant","content":""},"finish_reason":"length"}],
      "usage":{"prompt_tokens":50,"completion_tokens":16,"completion_tokens_details":{"reasoning_tokens":16}}})"));
  ChatRequest req;
  req.stream = false;
  req.max_output_tokens = 16;
  auto resp = Ask("openai:gpt-test", req);
  ASSERT_FALSE(resp.ok());
  EXPECT_EQ(resp.status().kind(), ErrorKind::kTruncated);
  EXPECT_NE(resp.status().message().find("16 of them reasoning"), std::string::npos);
  EXPECT_EQ(server_.count(), 1u);  // the same cap would truncate again: not retried
  EXPECT_EQ(spent_output_, 16);    // but what it cost is still reported
  EXPECT_NEAR(spent_usd_, (50 * 2.0 + 16 * 8.0) / 1e6, 1e-12);
  // ... and the error carries it, for the budgets of whoever asked.
  ASSERT_TRUE(resp.status().billed().has_value());
  EXPECT_EQ(resp.status().billed()->input_tokens, 50);
  EXPECT_EQ(resp.status().billed()->output_tokens, 16);
  EXPECT_NEAR(resp.status().billed()->usd, (50 * 2.0 + 16 * 8.0) / 1e6, 1e-12);
}

// An Anthropic stream that reported its usage and then broke: the provider
// billed that attempt, so the retried call's cost includes it.
const char* kBrokenAnthropic =
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\","
    "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-test\",\"content\":[],"
    "\"stop_reason\":null,\"usage\":{\"input_tokens\":1000,\"output_tokens\":300}}}\n\n"
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
    "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
    "\"delta\":{\"type\":\"text_delta\",\"text\":\"partial\"}}\n\n"
    "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
    "\"message\":\"Overloaded\"}}\n\n";

const char* kWholeAnthropic =
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_2\","
    "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-test\",\"content\":[],"
    "\"stop_reason\":null,\"usage\":{\"input_tokens\":1000,\"output_tokens\":1}}}\n\n"
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
    "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
    "\"delta\":{\"type\":\"text_delta\",\"text\":\"done\"}}\n\n"
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
    "\"end_turn\"},\"usage\":{\"output_tokens\":20}}\n\n"
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

TEST_F(HttpClientTest, BilledAttemptsThatWereRetriedAreInTheCost) {
  server_.Push(SseReply(kBrokenAnthropic));
  server_.Push(SseReply(kWholeAnthropic));
  auto resp = Ask("anthropic:claude-test");
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(retries_, std::vector<ErrorKind>{ErrorKind::kOverloaded});
  EXPECT_EQ(resp->text, "done");
  EXPECT_EQ(resp->usage.output_tokens, 20);
  EXPECT_EQ(resp->retried_usage.input_tokens, 1000);
  EXPECT_EQ(resp->retried_usage.output_tokens, 300);
  const double first = (1000 * 3.0 + 300 * 15.0) / 1e6, second = (1000 * 3.0 + 20 * 15.0) / 1e6;
  EXPECT_NEAR(resp->cost_usd, first + second, 1e-12);
  EXPECT_NEAR(spent_usd_, first + second, 1e-12);
  // What the turn records: both attempts' tokens, the whole cost, priced.
  const TokenUsage billed = resp->Billed();
  EXPECT_EQ(billed.input_tokens, 2000);
  EXPECT_EQ(billed.output_tokens, 320);
  EXPECT_NEAR(billed.cost_usd, first + second, 1e-12);
  EXPECT_TRUE(billed.priced);
}

TEST_F(HttpClientTest, ACallThatGaveUpSaysWhatItsAttemptsWereBilled) {
  options_.retry.max_attempts = 2;
  server_.Push(SseReply(kBrokenAnthropic));
  server_.Push(SseReply(kBrokenAnthropic));
  auto resp = Ask("anthropic:claude-test");
  ASSERT_FALSE(resp.ok());
  EXPECT_EQ(resp.status().kind(), ErrorKind::kOverloaded);
  ASSERT_TRUE(resp.status().billed().has_value()) << resp.status().ToString();
  EXPECT_EQ(resp.status().billed()->input_tokens, 2000);
  EXPECT_EQ(resp.status().billed()->output_tokens, 600);
  EXPECT_NEAR(resp.status().billed()->usd, 2 * (1000 * 3.0 + 300 * 15.0) / 1e6, 1e-12);
}

TEST_F(HttpClientTest, TruncatedWithTextIsAResponse) {
  KF_FIXTURE(body, "openai_chat_stream_length.sse");
  server_.Push(SseReply(body));
  auto resp = Ask("openai:gpt-test");
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->finish, FinishReason::kLength);
  EXPECT_EQ(FinishStatus(*resp).kind(), ErrorKind::kTruncated);
}

TEST_F(HttpClientTest, ServerDelayAboveTheCapIsFinal) {
  server_.Push(JsonReply(429, R"({"error":{"message":"slow down","type":"requests"}})",
                         {{"retry-after", "3600"}}));
  auto resp = Ask("openai:gpt-test");
  ASSERT_FALSE(resp.ok());
  EXPECT_EQ(resp.status().kind(), ErrorKind::kRateLimited);
  EXPECT_NE(resp.status().message().find("more than the 120 s cap"), std::string::npos);
  EXPECT_EQ(clock_.Elapsed(), Clock::Duration(0));
  // The delay travels with the status: the run's scheduler waits it out.
  ASSERT_TRUE(resp.status().retry_after_s().has_value());
  EXPECT_DOUBLE_EQ(*resp.status().retry_after_s(), 3600.0);
}

TEST_F(HttpClientTest, ShouldRetryFalseStops) {
  server_.Push(JsonReply(500, R"({"error":{"message":"no","type":"server_error"}})",
                         {{"x-should-retry", "false"}}));
  auto resp = Ask("openai:gpt-test");
  EXPECT_EQ(resp.status().kind(), ErrorKind::kServerError);
  EXPECT_EQ(server_.count(), 1u);
}

TEST_F(HttpClientTest, RefusedConnectionIsTransport) {
  int port = 0;
  {
    TestServer gone;  // bind a port, then free it
    port = std::stoi(gone.url().substr(gone.url().rfind(':') + 1));
  }
  options_.base_url = "http://127.0.0.1:" + std::to_string(port);
  options_.retry.max_attempts = 2;
  auto resp = Ask("openai:gpt-test");
  ASSERT_FALSE(resp.ok());
  EXPECT_EQ(resp.status().kind(), ErrorKind::kTransport);
  EXPECT_EQ(retries_.size(), 1u);
}

TEST_F(HttpClientTest, WorstCaseIsTheEstimatedPromptAndTheOutputCapAtListPrices) {
  ChatRequest req;
  req.system = std::string(150, 's');
  req.messages = {{"user", std::string(149, 'u')}};  // 299 characters: 100 tokens
  auto claude = MakeClient("anthropic:claude-test", options_);
  ASSERT_TRUE(claude.ok()) << claude.status().ToString();
  CostBound b = (*claude)->WorstCase(req);
  EXPECT_EQ(b.input_tokens, 100);
  EXPECT_EQ(b.output_tokens, 1000);  // no cap asked, no limit listed: the default it is sent
  ASSERT_TRUE(b.usd);
  EXPECT_NEAR(*b.usd, (100 * 3.0 + 1000 * 15.0) / 1e6, 1e-12);
  req.max_output_tokens = 2000;
  EXPECT_EQ((*claude)->WorstCase(req).output_tokens, 2000);
  // No cap and nothing listed: kUnknownOutputTokens.
  req.max_output_tokens.reset();
  auto gpt = MakeClient("openai:gpt-test", options_);
  ASSERT_TRUE(gpt.ok());
  b = (*gpt)->WorstCase(req);
  EXPECT_EQ(b.output_tokens, kUnknownOutputTokens);
  EXPECT_NEAR(*b.usd, (100 * 2.0 + kUnknownOutputTokens * 8.0) / 1e6, 1e-12);
}

TEST_F(HttpClientTest, MissingKeyNamesTheVariable) {
  options_.api_key.clear();
  auto client = MakeClient("openai:gpt-test", options_);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().kind(), ErrorKind::kAuth);
  EXPECT_NE(client.status().message().find("KFORGE_TEST_NO_SUCH_VAR"), std::string::npos);
  EXPECT_EQ(MakeClient("nosuch:model", options_).status().kind(), ErrorKind::kInvalidInput);
}

}  // namespace
}  // namespace kforge::providers
