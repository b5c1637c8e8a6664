// Stream parsers against the recorded streams, split at every byte offset.
#include <gtest/gtest.h>

#include "adapter.h"
#include "fixtures.h"
#include "sse.h"

namespace kforge::providers {
namespace {

using testing::ChunksToSse;

struct Decoded {
  ChatResponse response;
  std::string streamed;  // what the text callback saw
  std::optional<ProviderError> error;
  bool done = false;
  bool partial = false;
};

// Feeds `body` to an SSE parser and the wire format's decoder in the given pieces.
Decoded DecodeSse(WireFormat wire, std::string_view body, const std::vector<size_t>& cuts) {
  Decoded out;
  auto decoder = AdapterFor(wire).make_decoder();
  TextCallback cb = [&](std::string_view d) { out.streamed.append(d); };
  decoder->SetTextCallback(&cb);
  SseParser sse;
  size_t from = 0;
  std::vector<size_t> ends = cuts;
  ends.push_back(body.size());
  for (size_t to : ends) {
    sse.Feed(body.substr(from, to - from), [&](const SseEvent& ev) {
      if (!out.error) out.error = decoder->OnEvent(ev.event, ev.data);
    });
    from = to;
  }
  sse.Finish([&](const SseEvent& ev) {
    if (!out.error) out.error = decoder->OnEvent(ev.event, ev.data);
  });
  out.done = decoder->Done();
  out.partial = sse.HasPartialEvent();
  out.response = decoder->response();
  return out;
}

void ExpectSame(const Decoded& a, const Decoded& b, size_t offset) {
  SCOPED_TRACE("split at byte " + std::to_string(offset));
  EXPECT_EQ(a.response.text, b.response.text);
  EXPECT_EQ(a.streamed, b.streamed);
  EXPECT_EQ(a.response.reasoning, b.response.reasoning);
  EXPECT_EQ(a.response.finish, b.response.finish);
  EXPECT_EQ(a.response.usage.input_tokens, b.response.usage.input_tokens);
  EXPECT_EQ(a.response.usage.output_tokens, b.response.usage.output_tokens);
  EXPECT_EQ(a.response.usage.reasoning_tokens, b.response.usage.reasoning_tokens);
  EXPECT_EQ(a.response.request_id, b.response.request_id);
  EXPECT_EQ(a.done, b.done);
  EXPECT_EQ(a.error.has_value(), b.error.has_value());
}

// Every split into two pieces, plus one byte at a time, must decode exactly
// like the whole body.
Decoded CheckAllSplits(WireFormat wire, const std::string& body) {
  Decoded whole = DecodeSse(wire, body, {});
  for (size_t k = 0; k <= body.size(); ++k) {
    Decoded split = DecodeSse(wire, body, {k});
    ExpectSame(whole, split, k);
    if (::testing::Test::HasFailure()) return whole;
  }
  std::vector<size_t> every;
  for (size_t k = 1; k < body.size(); ++k) every.push_back(k);
  ExpectSame(whole, DecodeSse(wire, body, every), 0);
  return whole;
}

TEST(StreamTest, OpenAiChatStreamEverySplit) {
  KF_FIXTURE(body, "openai_chat_stream_ok.sse");
  Decoded d = CheckAllSplits(WireFormat::kOpenAiChat, body);
  EXPECT_TRUE(d.done);
  EXPECT_FALSE(d.error);
  EXPECT_EQ(d.response.text.rfind("I'm unable to provide real-time weather updates.", 0), 0u);
  EXPECT_EQ(d.streamed, d.response.text);
  EXPECT_EQ(d.response.finish, FinishReason::kStop);
  EXPECT_EQ(d.response.usage.input_tokens, 14);
  EXPECT_EQ(d.response.usage.output_tokens, 30);
  EXPECT_EQ(d.response.model, "gpt-4o-2024-08-06");
}

TEST(StreamTest, OpenAiChatStreamLengthEverySplit) {
  KF_FIXTURE(body, "openai_chat_stream_length.sse");
  Decoded d = CheckAllSplits(WireFormat::kOpenAiChat, body);
  EXPECT_TRUE(d.done);
  EXPECT_EQ(d.response.text, "{\"");
  EXPECT_EQ(d.response.finish, FinishReason::kLength);
  EXPECT_EQ(d.response.usage.input_tokens, 79);
  EXPECT_EQ(d.response.usage.output_tokens, 1);
}

TEST(StreamTest, AnthropicStreamEverySplit) {
  KF_FIXTURE(body, "anthropic_stream_ok.sse");
  Decoded d = CheckAllSplits(WireFormat::kAnthropic, body);
  EXPECT_TRUE(d.done);
  EXPECT_EQ(d.response.text, "[12345,67890]");
  EXPECT_EQ(d.response.finish, FinishReason::kStop);
  EXPECT_EQ(d.response.usage.input_tokens, 135);
  EXPECT_EQ(d.response.usage.output_tokens,
            10);  // message_delta's cumulative count replaces message_start's 1
  EXPECT_EQ(d.response.request_id, "msg_013nnniYDrJDocdy5nrMU7cH");
}

TEST(StreamTest, AnthropicMaxTokensStreamEverySplit) {
  KF_FIXTURE(body, "anthropic_stream_max_tokens.sse");
  Decoded d = CheckAllSplits(WireFormat::kAnthropic, body);
  EXPECT_TRUE(d.done);
  EXPECT_EQ(d.response.finish, FinishReason::kLength);
  EXPECT_EQ(d.response.text,
            "I'll create a comprehensive tax guide for someone with multiple W2s and save it in a "
            "file called "
            "taxes.txt. Let me do that for you now.");
  EXPECT_EQ(d.response.usage.input_tokens, 450);
  EXPECT_EQ(d.response.usage.output_tokens, 124);
}

TEST(StreamTest, GeminiSseEverySplit) {
  KF_FIXTURE(chunks, "gemini_stream.chunks.jsonl");
  Decoded d = CheckAllSplits(WireFormat::kGemini, ChunksToSse(chunks));
  EXPECT_TRUE(d.done);
  EXPECT_EQ(d.response.text, "There are **3** \"r\"s in strawberry.\n\nst**r**awbe**rr**y");
  // usageMetadata is cumulative: the last chunk's counts, not a sum.
  EXPECT_EQ(d.response.usage.input_tokens, 9);
  EXPECT_EQ(d.response.usage.output_tokens, 23 + 185);
  EXPECT_EQ(d.response.usage.reasoning_tokens, 185);
  EXPECT_EQ(d.response.request_id, "bH6LaZW8Fp_3nsEPqtaSwQ4");
}

TEST(StreamTest, ResponsesErrorStreamEverySplit) {
  KF_FIXTURE(chunks, "openai_responses_stream_error.chunks.jsonl");
  Decoded d = CheckAllSplits(WireFormat::kOpenAiResponses, ChunksToSse(chunks));
  ASSERT_TRUE(d.error.has_value());
  EXPECT_EQ(d.error->status.kind(), ErrorKind::kQuota);
  EXPECT_NE(d.error->status.message().find("exceeded your current quota"), std::string::npos);
}

TEST(StreamTest, GeminiArrayEverySplit) {
  KF_FIXTURE(body, "gemini_stream_array.json");
  auto run = [&](size_t k) {
    std::vector<std::string> objects;
    JsonSequenceParser p;
    auto sink = [&](std::string_view o) { objects.emplace_back(o); };
    p.Feed(std::string_view(body).substr(0, k), sink);
    p.Feed(std::string_view(body).substr(k), sink);
    EXPECT_FALSE(p.HasPartialObject());
    return objects;
  };
  auto whole = run(body.size());
  ASSERT_EQ(whole.size(), 2u);
  for (size_t k = 0; k <= body.size(); ++k) ASSERT_EQ(run(k), whole) << "split at " << k;
  auto parsed = AdapterFor(WireFormat::kGemini).parse(body);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->text, "Hello! How can I help you today?");
  EXPECT_EQ(parsed->model, "gemini-3.6-flash");
  EXPECT_EQ(parsed->usage.output_tokens, 9 + 179);
}

TEST(SseParserTest, FollowsTheEventStreamRules) {
  std::vector<SseEvent> events;
  SseParser p;
  auto sink = [&](const SseEvent& e) { events.push_back(e); };
  p.Feed(": keep-alive comment\r\n", sink);
  p.Feed("event: one\r\ndata: a\r\ndata:b\r\n\r\n", sink);
  p.Feed("data:  two spaces\r", sink);
  p.Feed("\n\r\n", sink);
  p.Feed("data: cut", sink);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(p.HasPartialEvent());
  p.Finish(sink);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].data, "cut");
  EXPECT_EQ(events[0].event, "one");
  EXPECT_EQ(events[0].data, "a\nb");
  EXPECT_EQ(events[1].event, "message");
  EXPECT_EQ(events[1].data, " two spaces");
  EXPECT_FALSE(p.HasPartialEvent());
}

TEST(SseParserTest, CommentOnlyBlocksDispatchNothing) {
  std::vector<SseEvent> events;
  SseParser p;
  p.Feed(":ping\n\n:ping\n\n", [&](const SseEvent& e) { events.push_back(e); });
  EXPECT_TRUE(events.empty());
  EXPECT_FALSE(p.HasPartialEvent());
}

TEST(StreamTest, ChatStreamErrorChunkIsAnError) {
  Decoded d =
      DecodeSse(WireFormat::kOpenAiChat,
                "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"
                "data: {\"error\":{\"message\":\"Rate limit reached. Please try again in 250ms.\","
                "\"type\":\"tokens\",\"code\":\"rate_limit_exceeded\"}}\n\n",
                {});
  ASSERT_TRUE(d.error);
  EXPECT_EQ(d.error->status.kind(), ErrorKind::kRateLimited);
  ASSERT_TRUE(d.error->retry_after);
  EXPECT_EQ(d.error->retry_after->count(), 250);
}

TEST(StreamTest, ReasoningFieldsOfCompatServers) {
  Decoded d = DecodeSse(
      WireFormat::kOpenAiChat,
      "data: {\"choices\":[{\"delta\":{\"reasoning\":\"think \"}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"more\"}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n"
      "data: [DONE]\n\n",
      {});
  EXPECT_EQ(d.response.reasoning, "think more");
  EXPECT_EQ(d.response.text, "ok");
  EXPECT_TRUE(d.done);
}

// Counts from the network are bounded: a value that is no count (1e120, a
// negative, 2^64 - 1, two near-2^63 counts whose sum overflows) reads as 0,
// and the counts that are counts still read.
TEST(StreamTest, UsageCountsOutOfRangeReadAsZero) {
  auto anthropic = AdapterFor(WireFormat::kAnthropic)
                       .parse(R"({"type":"message","model":"m","stop_reason":"end_turn",
      "content":[{"type":"text","text":"hi"}],
      "usage":{"input_tokens":9.33333e120,"cache_read_input_tokens":18446744073709551615,
               "cache_creation_input_tokens":-5,"output_tokens":7}})");
  ASSERT_TRUE(anthropic.ok()) << anthropic.status().ToString();
  EXPECT_EQ(anthropic->text, "hi");
  EXPECT_EQ(anthropic->usage.input_tokens, 0);
  EXPECT_EQ(anthropic->usage.output_tokens, 7);

  auto chat = AdapterFor(WireFormat::kOpenAiChat)
                  .parse(R"({"model":"m","choices":[{"message":{"content":"hi"},
      "finish_reason":"stop"}],"usage":{"prompt_tokens":1e300,"completion_tokens":12.0}})");
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  EXPECT_EQ(chat->usage.input_tokens, 0);
  EXPECT_EQ(chat->usage.output_tokens, 12);

  auto gemini =
      AdapterFor(WireFormat::kGemini).parse(R"({"candidates":[{"content":{"parts":[{"text":"hi"}]},
      "finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3,
      "candidatesTokenCount":9223372036854775807,"thoughtsTokenCount":9.2e18}})");
  ASSERT_TRUE(gemini.ok()) << gemini.status().ToString();
  EXPECT_EQ(gemini->usage.input_tokens, 3);
  EXPECT_EQ(gemini->usage.output_tokens, 0);
  EXPECT_EQ(gemini->usage.reasoning_tokens, 0);
}

}  // namespace
}  // namespace kforge::providers
