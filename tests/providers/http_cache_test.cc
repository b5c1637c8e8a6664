// The response cache, and recording then replaying answers, end to end over
// real HTTP against the local test server of http_client_fixture.h.
#include "http_client_fixture.h"

namespace kforge::providers {
namespace {

using namespace testing_http;  // NOLINT: the fixture's names, as if declared here

TEST_F(HttpClientTest, CacheAnswersRepeatsWithoutPaying) {
  KF_FIXTURE(ok, "anthropic_ok.json");
  options_.cache_enabled = true;
  options_.cache_dir = dir_ / "cache";
  server_.Push(JsonReply(200, ok));
  ChatRequest req;
  req.stream = false;
  auto first = Ask("anthropic:claude-test", req);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_GT(first->cost_usd, 0);
  auto second = Ask("anthropic:claude-test", req);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(second->cost_usd, 0);
  EXPECT_EQ(second->text, first->text);
  EXPECT_EQ(second->usage.input_tokens, 249);
  EXPECT_EQ(server_.count(), 1u);
  req.messages = {{"user", "something else"}};
  server_.Push(JsonReply(200, ok));
  ASSERT_TRUE(Ask("anthropic:claude-test", req).ok());
  EXPECT_EQ(server_.count(), 2u);
  options_.cache_enabled = false;  // the flag turns it off
  server_.Push(JsonReply(200, ok));
  ASSERT_TRUE(Ask("anthropic:claude-test", req).ok());
  EXPECT_EQ(server_.count(), 3u);
}

// Two deployments behind one spec (OPENAI_BASE_URL pointed elsewhere) are two
// caches: the second is asked, not answered with the first's reply. A hit is
// said in one INFO line naming the model and where the request sits.
TEST_F(HttpClientTest, CacheKeysOnTheEndpointAndTheDraw) {
  KF_FIXTURE(ok, "anthropic_ok.json");
  options_.cache_enabled = true;
  options_.cache_dir = dir_ / "cache";
  ChatRequest req;
  req.stream = false;
  req.messages = {{"user", "write the kernel"}};
  req.context = "task 001_allreduce, repeat 0, turn 0";
  server_.Push(JsonReply(200, ok));
  ASSERT_TRUE(Ask("anthropic:claude-test", req).ok());
  EXPECT_EQ(server_.count(), 1u);

  TestServer other;
  other.Push(JsonReply(200, ok));
  options_.base_url = other.url();
  auto b = Ask("anthropic:claude-test", req);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_FALSE(b->from_cache);
  EXPECT_EQ(other.count(), 1u);

  ::testing::internal::CaptureStderr();
  auto again = Ask("anthropic:claude-test", req);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->from_cache);
  EXPECT_EQ(other.count(), 1u);
  EXPECT_NE(log.find("INFO  providers: anthropic:claude-test (task 001_allreduce, repeat 0, turn "
                     "0): answered from the response cache"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(other.url()), std::string::npos) << log;

  // Another draw of the same request (a sample, a repeat) is asked too.
  req.draw = "repeat 1, turn 0";
  other.Push(JsonReply(200, ok));
  auto draw = Ask("anthropic:claude-test", req);
  ASSERT_TRUE(draw.ok()) << draw.status().ToString();
  EXPECT_FALSE(draw->from_cache);
  EXPECT_EQ(other.count(), 2u);

  // So is another output cap or temperature.
  req.max_output_tokens = 77;
  other.Push(JsonReply(200, ok));
  ASSERT_TRUE(Ask("anthropic:claude-test", req).ok());
  EXPECT_EQ(other.count(), 3u);
}

// An entry stored under the old key (the request alone) is never found: it
// cannot answer for an endpoint it did not come from.
TEST_F(HttpClientTest, OldCacheEntriesAreMisses) {
  KF_FIXTURE(ok, "anthropic_ok.json");
  options_.cache_enabled = true;
  options_.cache_dir = dir_ / "cache";
  ChatRequest req;
  req.stream = false;
  req.model = "anthropic:claude-test";
  req.messages = {{"user", "hello"}};
  const std::string old_key = RequestHash(req);
  ChatResponse stale;
  stale.text = "from another server";
  ASSERT_TRUE(ResponseCache(dir_ / "cache").Put(old_key, req, "", stale).ok());
  ASSERT_TRUE(ResponseCache(dir_ / "cache").Get(old_key).has_value());
  server_.Push(JsonReply(200, ok));
  auto r = Ask("anthropic:claude-test", req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->from_cache);
  EXPECT_NE(r->text, "from another server");
  EXPECT_EQ(server_.count(), 1u);
}

TEST_F(HttpClientTest, RecordThenReplayOffline) {
  KF_FIXTURE(ok, "anthropic_stream_ok.sse");
  options_.record_path = dir_ / "cassette.jsonl";
  server_.Push(SseReply(ok));
  ChatRequest req;
  req.system = "sys";
  req.messages = {{"user", "write the kernel"}};
  auto live = Ask("anthropic:claude-test", req);
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  req.model = "anthropic:claude-test";  // replay matches on the model the request names
  auto replay = MakeClient("replay:" + (dir_ / "cassette.jsonl").string(), ClientOptions{});
  ASSERT_TRUE(replay.ok()) << replay.status().ToString();
  auto again = (*replay)->Complete(req);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->text, "[12345,67890]");
  EXPECT_EQ(again->usage.output_tokens, 10);
  EXPECT_EQ(again->cost_usd, 0);
  req.messages[0].text = "write another kernel";
  auto miss = (*replay)->Complete(req);
  ASSERT_FALSE(miss.ok());
  EXPECT_EQ(miss.status().kind(), ErrorKind::kNotFound);
  EXPECT_NE(miss.status().message().find("write another kernel"), std::string::npos);
  EXPECT_EQ(server_.count(), 1u);
}

// What `kforge ask --record` then `kforge ask --model replay:FILE` (or a run
// with that spec) does: the replayed request names the cassette, not the model
// it was recorded from, and must still find the recording.
TEST_F(HttpClientTest, ARecordingReplaysUnderTheReplaySpec) {
  KF_FIXTURE(ok, "anthropic_stream_ok.sse");
  const std::filesystem::path cassette = dir_ / "rec.jsonl";
  options_.record_path = cassette;
  server_.Push(SseReply(ok));
  ChatRequest req;
  req.system = "sys";
  req.messages = {{"user", "hello there"}};
  req.max_output_tokens = 512;
  req.model = "anthropic:claude-test";
  ASSERT_TRUE(Ask("anthropic:claude-test", req).ok());
  const std::string spec = "replay:" + cassette.string();
  auto replay = MakeClient(spec, ClientOptions{});
  ASSERT_TRUE(replay.ok()) << replay.status().ToString();
  req.model = spec;
  auto again = (*replay)->Complete(req);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->text, "[12345,67890]");
  EXPECT_TRUE(again->from_cache);

  req.max_output_tokens = 1024;  // another request: no recording fits
  auto miss = (*replay)->Complete(req);
  ASSERT_FALSE(miss.ok());
  EXPECT_EQ(miss.status().kind(), ErrorKind::kNotFound);
  const std::string& m = miss.status().message();
  EXPECT_NE(m.find("none of its 1 entries fits"), std::string::npos) << m;
  EXPECT_EQ(m.find("1 matched"), std::string::npos) << m;
  EXPECT_EQ(server_.count(), 1u);
}

// What a run's budgets reserve before a call (docs/agent.md, "Budgets").

}  // namespace
}  // namespace kforge::providers
