// Whole-body parsing, error classification and retry decisions on the recorded bodies.
#include "errors.h"

#include <gtest/gtest.h>

#include "adapter.h"
#include "fixtures.h"
#include "json_util.h"
#include "retry.h"

namespace kforge::providers {
namespace {

using std::chrono::milliseconds;

ProviderError Classify(int status, const std::string& body,
                       std::map<std::string, std::string> headers = {}) {
  HttpResponseHead head;
  head.status = status;
  head.headers = std::move(headers);
  return ClassifyHttpError("test", head, body);
}

TEST(ParseTest, OpenAiChatUsageDetails) {
  KF_FIXTURE(body, "openai_chat_ok_usage_details.json");
  auto r = AdapterFor(WireFormat::kOpenAiChat).parse(body);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->usage.input_tokens, 16);
  EXPECT_EQ(r->usage.output_tokens, 363);
  EXPECT_EQ(r->finish, FinishReason::kStop);
  EXPECT_FALSE(r->text.empty());
}

TEST(ParseTest, OpenAiChatLength) {
  KF_FIXTURE(body, "openai_chat_length.json");
  auto r = AdapterFor(WireFormat::kOpenAiChat).parse(body);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kLength);
  EXPECT_EQ(r->text, "{\"");
}

TEST(ParseTest, LlamaCppReasoningAndCache) {
  KF_FIXTURE(body, "llamacpp_chat_ok.json");
  auto r = AdapterFor(WireFormat::kOpenAiChat).parse(body);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reasoning, "Need friendly greeting.");
  EXPECT_EQ(r->usage.input_tokens, 68);
  EXPECT_EQ(r->usage.cached_input_tokens, 60);
  EXPECT_EQ(r->usage.output_tokens, 25);
}

TEST(ParseTest, ResponsesJoinsOutputText) {
  KF_FIXTURE(body, "openai_responses_ok.json");
  auto r = AdapterFor(WireFormat::kOpenAiResponses).parse(body);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text.rfind("I can't provide real-time updates", 0), 0u);
  EXPECT_EQ(r->usage.input_tokens, 14);
  EXPECT_EQ(r->usage.output_tokens, 50);
  EXPECT_EQ(r->request_id, "resp_689a0b2545288193953c892439b42e2800b2e36c65a1fd4b");
}

TEST(ParseTest, AnthropicThinking) {
  KF_FIXTURE(body, "anthropic_thinking_ok.json");
  auto r = AdapterFor(WireFormat::kAnthropic).parse(body);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reasoning.rfind("I need to find all roots", 0), 0u);
  EXPECT_EQ(r->text.rfind("## Step 1", 0), 0u);
  EXPECT_EQ(r->usage.output_tokens, 1699);
  EXPECT_EQ(r->usage.reasoning_tokens, 139);
  EXPECT_EQ(r->usage.input_tokens, 51);
}

TEST(ParseTest, AnthropicCountsCacheOutsideInputTokens) {
  auto r = AdapterFor(WireFormat::kAnthropic)
               .parse(R"({"id":"m","content":[{"type":"text","text":"x"}],"stop_reason":"end_turn",
                  "usage":{"input_tokens":10,"cache_read_input_tokens":100,"cache_creation_input_tokens":1000,
                  "output_tokens":5}})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->usage.input_tokens, 1110);
  EXPECT_EQ(r->usage.cached_input_tokens, 100);
  EXPECT_EQ(r->usage.cache_write_input_tokens, 1000);
}

TEST(ParseTest, GeminiSkipsThoughtSignatureAndCountsThoughts) {
  KF_FIXTURE(body, "gemini_ok.json");
  auto r = AdapterFor(WireFormat::kGemini).parse(body);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text,
            "There are **3** r's in strawberry.\n\nHere is the breakdown: st**r**awbe**rr**y.");
  EXPECT_EQ(r->usage.input_tokens, 9);
  EXPECT_EQ(r->usage.output_tokens, 28 + 244);
  EXPECT_EQ(r->usage.reasoning_tokens, 244);
  EXPECT_EQ(r->request_id, "Un6LacrVMcjUxs0PmJfWoQc");
}

TEST(ParseTest, MalformedBodyIsAServerError) {
  auto r = AdapterFor(WireFormat::kOpenAiChat).parse("{\"choices\": [");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kServerError);
}

TEST(ClassifyTest, OpenAiInsufficientQuotaIsFinal) {
  KF_FIXTURE(body, "openai_429_insufficient_quota.json");
  ProviderError e = Classify(429, body);
  EXPECT_EQ(e.status.kind(), ErrorKind::kQuota);
  EXPECT_FALSE(DecideRetry(e, 1, RetryOptions{}, 0.5).retry);
}

TEST(ClassifyTest, UnsupportedParametersAreInvalidInput) {
  for (const char* name :
       {"openai_400_unsupported_max_tokens.json", "openai_400_unsupported_temperature.json",
        "gemini_400_invalid_argument.json"}) {
    KF_FIXTURE(body, name);
    ProviderError e = Classify(400, body);
    EXPECT_EQ(e.status.kind(), ErrorKind::kInvalidInput) << name;
    EXPECT_FALSE(DecideRetry(e, 1, RetryOptions{}, 0.5).retry) << name;
  }
}

TEST(ClassifyTest, LlamaCppContextOverflow) {
  KF_FIXTURE(body, "llamacpp_400_exceed_context.json");
  EXPECT_EQ(Classify(400, body).status.kind(), ErrorKind::kContextOverflow);
  // The reporter saw this body under a non-400 status: the body decides.
  EXPECT_EQ(Classify(500, body).status.kind(), ErrorKind::kContextOverflow);
}

TEST(ClassifyTest, AnthropicRateLimitHonoursShouldRetry) {
  KF_FIXTURE(body, "anthropic_429_rate_limit.json");
  ProviderError e = Classify(429, body, {{"x-should-retry", "true"}, {"retry-after", "7"}});
  EXPECT_EQ(e.status.kind(), ErrorKind::kRateLimited);
  EXPECT_EQ(e.should_retry, true);
  ASSERT_TRUE(e.retry_after);
  EXPECT_EQ(e.retry_after->count(), 7000);
  EXPECT_NE(e.status.message().find("req_011CYK5n67SytMUxm8WMZUWY"), std::string::npos);
  RetryDecision d = DecideRetry(e, 1, RetryOptions{}, 0.9);
  EXPECT_TRUE(d.retry);
  EXPECT_EQ(d.wait.count(), 7000);
}

TEST(ClassifyTest, AnthropicOverloaded) {
  KF_FIXTURE(body, "anthropic_overloaded_529.json");
  EXPECT_EQ(Classify(529, body).status.kind(), ErrorKind::kOverloaded);
}

TEST(ClassifyTest, GeminiRetryInfoDelay) {
  KF_FIXTURE(body, "gemini_429_resource_exhausted.json");
  ProviderError e = Classify(429, body);
  EXPECT_EQ(e.status.kind(), ErrorKind::kRateLimited);  // a per-minute quota id: wait and retry
  ASSERT_TRUE(e.retry_after);
  EXPECT_EQ(e.retry_after->count(), 34400);
}

TEST(ClassifyTest, GeminiDailyQuotaIsFinal) {
  ProviderError e =
      Classify(429, R"({"error":{"code":429,"status":"RESOURCE_EXHAUSTED","message":"quota",
      "details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure",
                  "violations":[{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]}]}})");
  EXPECT_EQ(e.status.kind(), ErrorKind::kQuota);
}

TEST(ClassifyTest, GeminiUnavailableIsOverloaded) {
  KF_FIXTURE(body, "gemini_503_unavailable.json");
  ProviderError e = Classify(503, body);
  EXPECT_EQ(e.status.kind(), ErrorKind::kOverloaded);
  EXPECT_NE(e.status.message().find("The model is overloaded"), std::string::npos);
}

TEST(ClassifyTest, SpendLimitAndAuth) {
  EXPECT_EQ(Classify(429, R"({"type":"error","error":{"type":"rate_limit_error","message":"spend",
      "details":{"error_code":"enforced_spend_limit_reached"}}})")
                .status.kind(),
            ErrorKind::kQuota);
  EXPECT_EQ(
      Classify(401,
               R"({"type":"error","error":{"type":"authentication_error","message":"bad key"}})")
          .status.kind(),
      ErrorKind::kAuth);
  EXPECT_EQ(
      Classify(400,
               R"({"error":{"code":400,"message":"API key not valid.","status":"INVALID_ARGUMENT",
      "details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID"}]}})")
          .status.kind(),
      ErrorKind::kAuth);
  EXPECT_EQ(
      Classify(
          429,
          R"({"error":{"message":"Request too large for gpt-4 on tokens per min (TPM): Limit 30000, Requested 50000.","type":"tokens","code":"rate_limit_exceeded"}})")
          .status.kind(),
      ErrorKind::kInvalidInput);
}

TEST(ClassifyTest, RetryHintsInOrder) {
  ProviderError e =
      Classify(429, R"({"error":{"message":"Please try again in 2.5s.","type":"requests"}})",
               {{"retry-after-ms", "1200"}, {"retry-after", "3"}});
  EXPECT_EQ(e.retry_after->count(), 1200);
  e = Classify(429, R"({"error":{"message":"Please try again in 2.5s.","type":"requests"}})");
  EXPECT_EQ(e.retry_after->count(), 2500);
  e = Classify(429, "{}", {{"retry-after", "Wed, 21 Oct 2015 07:28:00 GMT"}});  // in the past
  EXPECT_EQ(e.retry_after->count(), 0);
  e = Classify(500, "<html>bad gateway</html>");
  EXPECT_EQ(e.status.kind(), ErrorKind::kServerError);
  EXPECT_NE(e.status.message().find("bad gateway"), std::string::npos);
}

TEST(RetryTest, BackoffDoublesCapsAndJitters) {
  RetryOptions o;
  o.initial_backoff = milliseconds(1000);
  o.max_backoff = milliseconds(5000);
  o.max_attempts = 10;
  ProviderError e{Error(ErrorKind::kServerError, "x")};
  EXPECT_EQ(DecideRetry(e, 1, o, 0.0).wait.count(), 500);
  EXPECT_EQ(DecideRetry(e, 1, o, 1.0).wait.count(), 1000);
  EXPECT_EQ(DecideRetry(e, 3, o, 1.0).wait.count(), 4000);
  EXPECT_EQ(DecideRetry(e, 8, o, 1.0).wait.count(), 5000);
  ProviderError overloaded{Error(ErrorKind::kOverloaded, "x")};
  EXPECT_EQ(DecideRetry(overloaded, 1, o, 1.0).wait.count(), 2000);
  RetryDecision last = DecideRetry(e, 10, o, 0.0);
  EXPECT_FALSE(last.retry);
  EXPECT_NE(last.final_status.message().find("gave up after 10 attempts"), std::string::npos);
}

TEST(RetryTest, ServerDelayAboveCapIsFinalAndShouldRetryFalseStops) {
  RetryOptions o;
  ProviderError e{Error(ErrorKind::kRateLimited, "slow down"), milliseconds(600000)};
  RetryDecision d = DecideRetry(e, 1, o, 0.5);
  EXPECT_FALSE(d.retry);
  EXPECT_EQ(d.final_status.kind(), ErrorKind::kRateLimited);
  ProviderError no{Error(ErrorKind::kServerError, "x"), std::nullopt, false};
  EXPECT_FALSE(DecideRetry(no, 1, o, 0.5).retry);
  ProviderError quota{Error(ErrorKind::kQuota, "x"), std::nullopt, true};
  EXPECT_FALSE(DecideRetry(quota, 1, o, 0.5).retry);
}

TEST(RedactTest, RemovesKeys) {
  std::string s =
      Redact("Incorrect API key provided: sk-proj-abcdefghijklmnopqrstuvwx. key=mysecretvalue1",
             "mysecretvalue1");
  EXPECT_EQ(s.find("abcdefghijklmnop"), std::string::npos);
  EXPECT_EQ(s.find("mysecretvalue1"), std::string::npos);
  EXPECT_NE(s.find("[redacted]"), std::string::npos);
}

TEST(RedactTest, KeyShapesNeedTheirFullLength) {
  std::string short_keys = "sk-abcdefghijklmno AIzaabcdefghijklmnopqrstuvwxyz012";  // 15 and 29
  EXPECT_EQ(Redact(short_keys, ""), short_keys);
  EXPECT_EQ(Redact("(sk-abcdefghijklmnop) AIzaabcdefghijklmnopqrstuvwxyz0123.", ""),
            "([redacted]) [redacted].");
}

TEST(RedactTest, ASecretInsideTheReplacementEnds) {
  EXPECT_EQ(Redact("a redacted b redacted", "redacted"), "a [redacted] b [redacted]");
  EXPECT_EQ(Redact("[redacted]", "[redacted]"), "[redacted]");
}

// Error bodies of megabytes, built to defeat a backtracking matcher, are
// handled in one pass (std::regex overflowed the stack on them).
std::string Repeat(std::string_view piece, size_t bytes) {
  std::string out;
  out.reserve(bytes + piece.size());
  while (out.size() < bytes) out.append(piece);
  return out;
}

constexpr size_t kMegabyte = 1 << 20;

TEST(RedactTest, MegabyteKeysAndNearKeys) {
  EXPECT_EQ(Redact("key: sk-" + Repeat("a", 2 * kMegabyte) + ".", ""), "key: [redacted].");
  EXPECT_EQ(Redact(Repeat("sk-", 2 * kMegabyte), ""), "[redacted]");
  std::string near = Repeat("sk-abcdefghijklmno AIza0123456789012345678901234567 ", kMegabyte);
  EXPECT_EQ(Redact(near, ""), near);
}

TEST(ClassifyTest, MegabyteRetryHintsInTheMessage) {
  ProviderError e =
      Classify(429, R"({"error":{"type":"requests","message":")" +
                        Repeat("try again in 1", kMegabyte) + R"( try again in 7ms"}})");
  ASSERT_TRUE(e.retry_after.has_value());
  EXPECT_EQ(e.retry_after->count(), 7);
  e = Classify(429, R"({"error":{"type":"requests","message":"Try again in )" +
                        Repeat("9", kMegabyte) + R"(.5S"}})");
  ASSERT_TRUE(e.retry_after.has_value());  // far past any cap, but a number
  EXPECT_GT(e.retry_after->count(), int64_t{1} << 40);
  EXPECT_EQ(e.status.kind(), ErrorKind::kRateLimited);
  e = Classify(429, R"({"error":{"type":"requests","message":"try again in 2.ms or 3.5x"}})");
  EXPECT_FALSE(e.retry_after.has_value());
}

TEST(ClassifyTest, MegabyteBodies) {
  ProviderError e = Classify(502, "<html>" + Repeat("bad gateway ", 4 * kMegabyte));
  EXPECT_EQ(e.status.kind(), ErrorKind::kServerError);
  EXPECT_LT(e.status.message().size(), 400u);
  e = Classify(429, Repeat("[", 2 * kMegabyte));
  EXPECT_EQ(e.status.kind(), ErrorKind::kRateLimited);
  e = Classify(400, R"({"error":{"type":"invalid_request_error","message":")" +
                        Repeat("sk-", kMegabyte) + R"("}})");
  EXPECT_EQ(e.status.kind(), ErrorKind::kInvalidInput);
}

TEST(ClassifyTest, DelaysThatAreNotFiniteNumbers) {
  ProviderError e = Classify(429, "{}", {{"retry-after-ms", "nan"}, {"retry-after", "2"}});
  EXPECT_EQ(e.retry_after->count(), 2000);
  e = Classify(429, "{}", {{"retry-after", "1e300"}});
  ASSERT_TRUE(e.retry_after.has_value());
  EXPECT_GT(e.retry_after->count(), int64_t{1} << 40);
  e = Classify(429, "{}", {{"retry-after", "-inf"}});
  EXPECT_FALSE(e.retry_after.has_value());
  EXPECT_FALSE(ParseDurationText("nan").has_value());
  EXPECT_GT(ParseDurationText("inf")->count(), int64_t{1} << 40);
  EXPECT_EQ(ParseDurationText("34.4s")->count(), 34400);
}

// Serialises a message the way run events store it; throws on bytes that are not UTF-8.
std::string AsJson(const std::string& message) { return nlohmann::json(message).dump(); }

TEST(ClassifyTest, RawBodiesQuotedInMessagesStayUtf8) {
  // A proxy's Latin-1 error page, a UTF-8 character cut by the 300-byte limit,
  // and a request id header of raw bytes.
  ProviderError e = Classify(502,
                             "<html>Erreur \xe9"
                             "chou\xe9"
                             "e</html>",
                             {{"x-request-id",
                               "r\xff"
                               "1"}});
  EXPECT_NO_THROW(AsJson(e.status.message()));
  EXPECT_NE(e.status.message().find("Erreur \xef\xbf\xbd"), std::string::npos)
      << e.status.message();
  e = Classify(500, std::string(299, 'a') + "\xc3\xa9 and more");
  EXPECT_NO_THROW(AsJson(e.status.message()));
  EXPECT_TRUE(e.status.message().ends_with(": " + std::string(299, 'a'))) << e.status.message();
  for (WireFormat wire : {WireFormat::kOpenAiChat, WireFormat::kOpenAiResponses,
                          WireFormat::kAnthropic, WireFormat::kGemini}) {
    Result<ChatResponse> r = AdapterFor(wire).parse("\xff\xfe{not json");
    ASSERT_FALSE(r.ok());
    EXPECT_NO_THROW(AsJson(r.status().message())) << WireFormatName(wire);
    std::optional<ProviderError> stream_error =
        AdapterFor(wire).make_decoder()->OnEvent("message", "\xf0\x9f\x98{");
    ASSERT_TRUE(stream_error.has_value()) << WireFormatName(wire);
    EXPECT_NO_THROW(AsJson(stream_error->status.message())) << WireFormatName(wire);
  }
}

TEST(Utf8PrefixTest, KeepsWellFormedTextAndReplacesTheRest) {
  EXPECT_EQ(Utf8Prefix("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", 100),
            "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(Utf8Prefix("ab\xc3\xa9", 3), "ab");  // never half a character
  EXPECT_EQ(Utf8Prefix("\xff", 10), "\xef\xbf\xbd");
  // Overlong, surrogate, past U+10FFFF, truncated: each byte becomes U+FFFD.
  EXPECT_EQ(Utf8Prefix("\xc0\xaf", 10), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(Utf8Prefix("\xed\xa0\x80", 10).size(), 9u);
  EXPECT_EQ(Utf8Prefix("\xf4\x90\x80\x80", 20).size(), 12u);
  EXPECT_EQ(Utf8Prefix("x\xe2\x82", 10), "x\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(Utf8Prefix(std::string(1 << 20, '\x80'), 30).size(), 30u);
}

}  // namespace
}  // namespace kforge::providers
