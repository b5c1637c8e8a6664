// The eval-server on loopback, in-process, over fake slots: every refusal
// (401, 413, 429, 409, 404, 422, 503) with nothing run, 16 concurrent clients
// answered exactly once, and the drain.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "fake_slot.h"
#include "kforge/core/fs.h"
#include "kforge/remote/client.h"
#include "kforge/remote/rendezvous.h"

namespace kforge::remote {
namespace {

using namespace testing;  // NOLINT: the fixtures of this test only
namespace fs = std::filesystem;

TEST(EvalServer, MissingOrWrongTokensAre401AndRunNothing) {
  Gate gate;
  gate.Open();
  TestServer s(Options(), &gate);
  EXPECT_EQ(Get(s.url(), "/v1/healthz", "").status, 200);  // health needs no token
  for (const std::string& token : {std::string(), std::string("wrong-token-0123456789abcdef")}) {
    HttpReply info = Get(s.url(), "/v1/info", token);
    EXPECT_EQ(info.status, 401);
    EXPECT_EQ(ErrorCode(info), "unauthorized");
    HttpReply job = Post(s.url(), JobBody("k"), token);
    EXPECT_EQ(job.status, 401) << job.body;
    EXPECT_EQ(ErrorCode(job), "unauthorized");
    // The refusal never echoes what was presented.
    if (!token.empty()) {
      EXPECT_EQ(job.body.find(token), std::string::npos);
    }
  }
  EXPECT_EQ(gate.started(), 0);
  EXPECT_EQ(Post(s.url(), JobBody("k"), kToken).status, 200);
  EXPECT_EQ(Post(s.url(), JobBody("k"), kOtherToken).status, 200);
  EXPECT_EQ(gate.started(), 2);
}

TEST(EvalServer, OversizedUploadIs413AndRunsNothing) {
  Gate gate;
  gate.Open();
  EvalServerOptions o = Options();
  o.max_upload_bytes = 4096;
  TestServer s(o, &gate);
  HttpReply big = Post(s.url(), JobBody(std::string(8000, 'x')));
  EXPECT_EQ(big.status, 413);
  EXPECT_EQ(ErrorCode(big), "too_large");
  EXPECT_NE(big.body.find("4096"), std::string::npos) << big.body;
  // Without a token the body is not even read: 401 first.
  EXPECT_EQ(Post(s.url(), JobBody(std::string(8000, 'x')), "").status, 401);
  EXPECT_EQ(gate.started(), 0);
  EXPECT_EQ(Post(s.url(), JobBody(std::string(1000, 'x'))).status, 200);
}

TEST(EvalServer, FullQueueIs429WithRetryAfter) {
  Gate gate;
  EvalServerOptions o = Options();
  o.max_queue = 1;
  TestServer s(o, &gate);
  auto first = std::async(std::launch::async, [&] { return Post(s.url(), JobBody("one")); });
  ASSERT_TRUE(gate.WaitStarted(1));
  auto second = std::async(std::launch::async, [&] { return Post(s.url(), JobBody("two")); });
  ASSERT_TRUE(WaitForInfo(
      s.url(), [](const nlohmann::json& j) { return j["queue"]["compile_waiting"] == 1; }));
  HttpReply third = Post(s.url(), JobBody("three"));
  EXPECT_EQ(third.status, 429);
  EXPECT_EQ(ErrorCode(third), "queue_full");
  ASSERT_FALSE(third.retry_after.empty());
  EXPECT_GE(std::stoi(third.retry_after), 1);
  // The client sees a lost slot it may retry, with the server's wait.
  RemotePortOptions po;
  po.url = s.url();
  po.token = kToken;
  po.task_suite_hash = kSuite;
  auto port = MakeRemoteEvalService(po);
  auto lost = port->Evaluate({"001_allreduce", "four", "k.cu", 2, "", true});
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().kind(), ErrorKind::kSlotLost);
  ASSERT_TRUE(lost.status().retry_after_s());
  EXPECT_GE(*lost.status().retry_after_s(), 1);
  gate.Open();
  EXPECT_EQ(first.get().status, 200);
  EXPECT_EQ(second.get().status, 200);
  EXPECT_EQ(gate.seen().count("three"), 0u);
  EXPECT_EQ(gate.seen().count("four"), 0u);
}

TEST(EvalServer, PerTokenCapRefusesOnlyThatToken) {
  Gate gate;
  EvalServerOptions o = Options();
  o.per_token = 1;
  o.compile_slots = 2;
  TestServer s(o, &gate);
  auto held = std::async(std::launch::async, [&] { return Post(s.url(), JobBody("a1")); });
  ASSERT_TRUE(gate.WaitStarted(1));
  HttpReply again = Post(s.url(), JobBody("a2"));
  EXPECT_EQ(again.status, 429);
  EXPECT_EQ(ErrorCode(again), "token_limit");
  EXPECT_FALSE(again.retry_after.empty());
  auto other =
      std::async(std::launch::async, [&] { return Post(s.url(), JobBody("b1"), kOtherToken); });
  ASSERT_TRUE(gate.WaitStarted(2));
  gate.Open();
  EXPECT_EQ(held.get().status, 200);
  EXPECT_EQ(other.get().status, 200);
  EXPECT_EQ(gate.seen().count("a2"), 0u);
}

TEST(EvalServer, JobsThatDoNotFitAreRefusedWithTheirReason) {
  Gate gate;
  gate.Open();
  EvalServerOptions o = Options();
  o.world = 2;
  TestServer s(o, &gate);
  HttpReply suite = Post(s.url(), JobBody("k", true, "001_allreduce", "suite-hash-B"));
  EXPECT_EQ(suite.status, 409);
  EXPECT_EQ(ErrorCode(suite), "task_suite_mismatch");
  EXPECT_NE(suite.body.find("suite-hash-B"), std::string::npos);
  auto body = nlohmann::json::parse(JobBody("k"));
  body["kforge_version"] = "9.9.9";
  HttpReply version = Post(s.url(), body.dump());
  EXPECT_EQ(version.status, 409);
  EXPECT_EQ(ErrorCode(version), "version_mismatch");
  HttpReply task = Post(s.url(), JobBody("k", true, "999_nope"));
  EXPECT_EQ(task.status, 404);
  EXPECT_EQ(ErrorCode(task), "unknown_task");
  HttpReply gpu = Post(s.url(), JobBody("k", false));
  EXPECT_EQ(gpu.status, 422);  // this server has compile slots only
  EXPECT_EQ(ErrorCode(gpu), "no_slot");
  HttpReply junk = Post(s.url(), "{not json");
  EXPECT_EQ(junk.status, 400);
  EXPECT_EQ(ErrorCode(junk), "bad_request");
  body = nlohmann::json::parse(JobBody("k"));
  body["job"]["kernel_name"] = "../../etc/passwd";
  HttpReply name = Post(s.url(), body.dump());
  EXPECT_EQ(name.status, 400);
  body = nlohmann::json::parse(JobBody("k"));
  body["job"]["world"] = "two";
  HttpReply world = Post(s.url(), body.dump());
  EXPECT_EQ(world.status, 400);
  EXPECT_NE(world.body.find("world"), std::string::npos);
  EXPECT_EQ(gate.started(), 0);
}

TEST(EvalServer, GpuJobsMustAskForTheServersWorldSize) {
  Gate gate;
  gate.Open();
  EvalServerOptions o = Options();
  o.gpu_sets = {{0, 1}};
  o.world = 2;
  TestServer s(o, &gate);
  auto body = nlohmann::json::parse(JobBody("k", false));
  body["job"]["world"] = 4;
  HttpReply w4 = Post(s.url(), body.dump());
  EXPECT_EQ(w4.status, 422);
  EXPECT_EQ(ErrorCode(w4), "unsupported_world");
  HttpReply w2 = Post(s.url(), JobBody("k", false));
  EXPECT_EQ(w2.status, 200);
  auto doc = nlohmann::json::parse(w2.body);
  EXPECT_EQ(doc["evaluated_by"]["pool"], "gpu");
  EXPECT_EQ(doc["evaluated_by"]["slot"], 0);
  EXPECT_EQ(gate.started(), 1);
}

TEST(EvalServer, SixteenConcurrentClientsAreEachAnsweredOnce) {
  Gate gate;
  gate.Open();
  EvalServerOptions o = Options();
  o.compile_slots = 3;
  o.max_queue = 16;
  TestServer s(o, &gate);
  RemotePortOptions po;
  po.url = s.url();
  po.token = kToken;
  po.task_suite_hash = kSuite;
  std::vector<std::future<Result<nlohmann::json>>> answers;
  for (int i = 0; i < 16; ++i) {
    answers.push_back(std::async(std::launch::async, [po, i] {
      auto port = MakeRemoteEvalService(po);
      return port->Evaluate({"002_allgather", "job-" + std::to_string(i), "k.cu", 2, "", true});
    }));
  }
  for (int i = 0; i < 16; ++i) {
    auto doc = answers[i].get();
    ASSERT_TRUE(doc.ok()) << i << ": " << doc.status().ToString();
    EXPECT_EQ((*doc)["message"], "job-" + std::to_string(i));  // its own answer
    EXPECT_EQ((*doc)["evaluated_by"]["pool"], "compile");
  }
  auto seen = gate.seen();
  ASSERT_EQ(seen.size(), 16u);
  for (const auto& [source, n] : seen) EXPECT_EQ(n, 1) << source;
  HttpReply info = Get(s.url(), "/v1/info");
  EXPECT_EQ(nlohmann::json::parse(info.body)["queue"]["answered"], 16);
}

TEST(EvalServer, DrainAnswersAdmittedJobsRefusesNewOnesAndUnregisters) {
  auto dir = MakeTempDir("kforge-drain");
  ASSERT_TRUE(dir.ok());
  Gate gate;
  EvalServerOptions o = Options();
  o.register_file = *dir / "workers" / "server.json";
  TestServer s(o, &gate);
  // Registered once serving: the URL and the slots.
  ASSERT_TRUE(WaitForInfo(s.url(), [](const nlohmann::json&) { return true; }));
  auto reg = ReadRegistration(o.register_file);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  EXPECT_EQ(reg->url, s.url());
  EXPECT_EQ(reg->compile_slots, 1);
  EXPECT_EQ(reg->gpu_slots, 0);
  EXPECT_EQ(reg->pid, static_cast<int>(getpid()));

  auto running = std::async(std::launch::async, [&] { return Post(s.url(), JobBody("held")); });
  ASSERT_TRUE(gate.WaitStarted(1));
  auto queued = std::async(std::launch::async, [&] { return Post(s.url(), JobBody("queued")); });
  ASSERT_TRUE(WaitForInfo(
      s.url(), [](const nlohmann::json& j) { return j["queue"]["compile_waiting"] == 1; }));
  std::future<Status> stopped = std::async(std::launch::async, [&] { return s.Stop(); });
  ASSERT_TRUE(WaitForInfo(s.url(), [](const nlohmann::json& j) { return j["draining"] == true; }));
  EXPECT_EQ(Get(s.url(), "/v1/healthz", "").status, 503);
  HttpReply late = Post(s.url(), JobBody("late"));
  EXPECT_EQ(late.status, 503);
  EXPECT_EQ(ErrorCode(late), "draining");
  EXPECT_FALSE(late.retry_after.empty());
  EXPECT_FALSE(fs::exists(o.register_file));  // no longer offered to anyone
  gate.Open();
  HttpReply a = running.get(), b = queued.get();
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(nlohmann::json::parse(a.body)["message"], "held");
  EXPECT_EQ(b.status, 200);
  EXPECT_EQ(nlohmann::json::parse(b.body)["message"], "queued");
  EXPECT_TRUE(stopped.get().ok());
  EXPECT_EQ(gate.seen().count("late"), 0u);
  std::error_code ec;
  fs::remove_all(*dir, ec);
}

}  // namespace
}  // namespace kforge::remote
