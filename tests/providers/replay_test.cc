// Hand-written cassettes: matching by hash, then by model, turn and marker.
#include <gtest/gtest.h>

#include "kforge/core/fs.h"
#include "kforge/providers/client.h"
#include "kforge/testing/test_util.h"
#include "transcript.h"

namespace kforge::providers {
namespace {

class ReplayTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& text) {
    auto p = dir_ / "c.jsonl";
    EXPECT_TRUE(WriteFileAtomic(p, text).ok());
    return p.string();
  }
  testing::TempDir tmp_{"kforge-replay-test"};
  const std::filesystem::path dir_ = tmp_.path();
};

ChatRequest Req(std::string model, std::vector<Message> messages, std::string system = "") {
  ChatRequest r;
  r.model = std::move(model);
  r.messages = std::move(messages);
  r.system = std::move(system);
  return r;
}

TEST_F(ReplayTest, MatchesByModelTurnAndMarker) {
  std::string path = Write(
      "# demo cassette\n"
      R"({"model":"anthropic:claude-opus-4-7","turn":0,"marker":"task: allreduce","response":{"text":"first allreduce"}})"
      "\n"
      R"({"model":"anthropic:claude-opus-4-7","turn":1,"marker":"task: allreduce","response":{"text":"second allreduce","usage":{"input_tokens":5,"output_tokens":7}}})"
      "\n"
      R"({"turn":0,"response":{"text":"any model, first turn"}})"
      "\n");
  auto client = MakeClient("replay:" + path, {});
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto a =
      (*client)->Complete(Req("anthropic:claude-opus-4-7", {{"user", "x"}}, "task: allreduce"));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->text, "first allreduce");
  auto b = (*client)->Complete(Req(
      "anthropic:claude-opus-4-7",
      {{"user", "x"}, {"assistant", "first allreduce"}, {"user", "faster"}}, "task: allreduce"));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->text, "second allreduce");
  EXPECT_EQ(b->usage.output_tokens, 7);
  auto c = (*client)->Complete(Req("openai:gpt-5.5", {{"user", "task: alltoall"}}));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->text, "any model, first turn");
  auto miss = (*client)->Complete(
      Req("openai:gpt-5.5", {{"user", "a"}, {"assistant", "b"}, {"user", "c"}}));
  ASSERT_FALSE(miss.ok());
  EXPECT_EQ(miss.status().kind(), ErrorKind::kNotFound);
  EXPECT_NE(miss.status().message().find("turn 1"), std::string::npos) << miss.status().message();
}

TEST_F(ReplayTest, ExactHashWinsOverLooseEntries) {
  ChatRequest r = Req("m:x", {{"user", "hi"}});
  std::string hash = RequestHash(r);
  std::string path = Write(R"({"model":"m:x","response":{"text":"loose"}})"
                           "\n"
                           R"({"hash":")" +
                           hash +
                           R"(","response":{"text":"exact"}})"
                           "\n");
  auto client = MakeClient("replay:" + path, {});
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->Complete(r)->text, "exact");
  r.temperature = 0.3;  // a different request: the hash no longer fits
  EXPECT_EQ((*client)->Complete(r)->text, "loose");
}

TEST_F(ReplayTest, BadLinesNameTheLine) {
  std::string path = Write(R"({"response":{"text":"ok"}})"
                           "\n\n"
                           R"({"response":{"txt":"typo"}})"
                           "\n");
  auto client = MakeClient("replay:" + path, {});
  ASSERT_FALSE(client.ok());
  EXPECT_NE(client.status().message().find("c.jsonl:3"), std::string::npos)
      << client.status().message();
  EXPECT_NE(client.status().message().find("response.text"), std::string::npos);
  EXPECT_EQ(MakeClient("replay:" + (dir_ / "absent.jsonl").string(), {}).status().kind(),
            ErrorKind::kNotFound);
}

TEST_F(ReplayTest, HashIgnoresStreamingButNotContent) {
  ChatRequest a = Req("m:x", {{"user", "hi"}});
  ChatRequest b = a;
  b.stream = false;
  EXPECT_EQ(RequestHash(a), RequestHash(b));
  b.messages[0].text = "hi ";
  EXPECT_NE(RequestHash(a), RequestHash(b));
  b = a;
  b.system = "s";
  EXPECT_NE(RequestHash(a), RequestHash(b));
}

}  // namespace
}  // namespace kforge::providers
