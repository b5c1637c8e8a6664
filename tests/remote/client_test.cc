// The client side: what RemoteEvalService makes of each way a server can fail,
// following a server that re-registered elsewhere, and ConnectEvaluators'
// checks and slot order.
#include "kforge/remote/client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "fake_slot.h"
#include "kforge/core/fs.h"
#include "kforge/remote/connect.h"
#include "kforge/remote/rendezvous.h"

namespace kforge::remote {
namespace {

using namespace testing;  // NOLINT: the fixtures of this test only
namespace fs = std::filesystem;

eval::EvalRequest Job(const std::string& source) {
  return {"001_allreduce", source, "k.cu", 2, "", true};
}

RemotePortOptions PortTo(const std::string& url, const std::string& token = kToken,
                         const std::string& suite = kSuite) {
  RemotePortOptions o;
  o.url = url;
  o.token = token;
  o.task_suite_hash = suite;
  o.timeout_s = 30;
  return o;
}

// A port nothing listens on: bound by a server that then went away.
std::string DeadUrl() {
  Gate gate;
  gate.Open();
  TestServer s(Options(), &gate);
  std::string url = s.url();
  EXPECT_TRUE(s.Stop().ok());
  return url;
}

TEST(RemoteEvalService, EachFailureHasTheKindTheRunBranchesOn) {
  Gate gate;
  gate.Open();
  TestServer s(Options(), &gate);
  auto ok = MakeRemoteEvalService(PortTo(s.url()))->Evaluate(Job("fine"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)["message"], "fine");

  auto auth =
      MakeRemoteEvalService(PortTo(s.url(), "wrong-token-0123456789abcdef"))->Evaluate(Job("x"));
  EXPECT_EQ(auth.status().kind(), ErrorKind::kAuth);
  EXPECT_EQ(auth.status().message().find("wrong-token"), std::string::npos);  // never echoed

  auto suite = MakeRemoteEvalService(PortTo(s.url(), kToken, "other-suite"))->Evaluate(Job("x"));
  EXPECT_EQ(suite.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(suite.status().message().find("task_suite_mismatch"), std::string::npos);

  eval::EvalRequest unknown = Job("x");
  unknown.task = "999_nope";
  EXPECT_EQ(MakeRemoteEvalService(PortTo(s.url()))->Evaluate(unknown).status().kind(),
            ErrorKind::kNotFound);

  // Nobody listening: the slot is lost, the job is fine.
  auto dead = MakeRemoteEvalService(PortTo(DeadUrl()))->Evaluate(Job("x"));
  EXPECT_EQ(dead.status().kind(), ErrorKind::kSlotLost);
  EXPECT_EQ(gate.seen().size(), 1u);
}

TEST(RemoteEvalService, FollowsItsServersRegistrationFile) {
  auto dir = MakeTempDir("kforge-follow");
  ASSERT_TRUE(dir.ok());
  const fs::path file = *dir / "1_0.json";
  Gate gate;
  gate.Open();
  TestServer s(Options(), &gate);
  RemotePortOptions o = PortTo(DeadUrl());
  o.registration = file;
  auto port = MakeRemoteEvalService(o);
  // No file: the server has gone (or not come back yet).
  auto gone = port->Evaluate(Job("x"));
  EXPECT_EQ(gone.status().kind(), ErrorKind::kSlotLost);
  EXPECT_NE(gone.status().message().find("no longer registered"), std::string::npos);
  // The server registers (a requeued task, on another port): the port follows.
  Registration r;
  r.url = s.url();
  r.compile_slots = 1;
  ASSERT_TRUE(WriteRegistration(file, r).ok());
  auto found = port->Evaluate(Job("followed"));
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ((*found)["message"], "followed");
  std::error_code ec;
  fs::remove_all(*dir, ec);
}

// A listener that never accepts: connections complete in the kernel's
// backlog and nothing ever answers, as with a stopped or wedged server.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(::listen(fd_, 64), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    url_ = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  }
  ~SilentListener() { ::close(fd_); }
  const std::string& url() const { return url_; }

 private:
  int fd_ = -1;
  std::string url_;
};

TEST(RemoteEvalService, GivesUpAJobWhoseServerAnswersNoHealthCheck) {
  SilentListener silent;
  RemotePortOptions o = PortTo(silent.url());
  o.timeout_s = 120;  // the job's own timeout is not what ends it
  o.liveness_s = 1;
  auto r = MakeRemoteEvalService(o)->Evaluate(Job("x"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kSlotLost);
  EXPECT_NE(r.status().message().find("no answer to its health checks for 1 s"), std::string::npos)
      << r.status().ToString();
}

TEST(RemoteEvalService, KeepsAJobWhoseServerAnswersItsHealthChecks) {
  Gate gate;  // holds the job for several liveness windows
  TestServer s(Options(), &gate);
  RemotePortOptions o = PortTo(s.url());
  o.liveness_s = 0.5;
  std::thread opener([&gate] {
    EXPECT_TRUE(gate.WaitStarted(1));
    std::this_thread::sleep_for(std::chrono::seconds(3));
    gate.Open();
  });
  auto r = MakeRemoteEvalService(o)->Evaluate(Job("held"));
  opener.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["message"], "held");
}

TEST(ConnectEvaluators, SpreadsSlotsOverServersAndRefusesMisfits) {
  Gate gate;
  gate.Open();
  EvalServerOptions one = Options(), two = Options();
  two.compile_slots = 2;
  TestServer a(one, &gate), b(two, &gate);
  ConnectOptions co;
  co.token = kToken;
  co.task_suite_hash = kSuite;
  co.need_gpu = false;
  auto slots = ConnectEvaluators({{a.url(), {}}, {b.url(), {}}}, co);
  ASSERT_TRUE(slots.ok()) << slots.status().ToString();
  ASSERT_EQ(slots->compile.size(), 3u);
  // Interleaved: a's slot, b's first, then b's second.
  EXPECT_EQ(slots->compile_names[0], a.url() + " (compile slot 0)");
  EXPECT_EQ(slots->compile_names[1], b.url() + " (compile slot 0)");
  EXPECT_EQ(slots->compile_names[2], b.url() + " (compile slot 1)");
  EXPECT_EQ(slots->compile_groups[0], a.url());
  EXPECT_EQ(slots->compile_groups[2], b.url());
  EXPECT_TRUE(slots->gpu.empty());
  EXPECT_TRUE(slots->hardware.is_null());
  auto doc = slots->compile[1]->Evaluate(Job("via-b"));
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();

  ConnectOptions other = co;
  other.task_suite_hash = "another-suite";
  auto mismatch = ConnectEvaluators({{a.url(), {}}}, other);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find(a.url()), std::string::npos);
  EXPECT_NE(mismatch.status().message().find("another-suite"), std::string::npos);
  ConnectOptions bad_token = co;
  bad_token.token = "wrong-token-0123456789abcdef";
  EXPECT_EQ(ConnectEvaluators({{a.url(), {}}}, bad_token).status().kind(), ErrorKind::kAuth);
  auto unreachable = ConnectEvaluators({{DeadUrl(), {}}}, co);
  EXPECT_EQ(unreachable.status().kind(), ErrorKind::kTransport);
  EXPECT_EQ(ConnectEvaluators({}, co).status().kind(), ErrorKind::kInvalidInput);
}

TEST(ConnectEvaluators, GpuServersMustHoldTheRunsWorldSize) {
  Gate gate;
  gate.Open();
  EvalServerOptions o = Options();
  o.gpu_sets = {{0, 1}, {2, 3}};
  o.world = 2;
  o.hardware = {{"gpus", {{{"index", 0}, {"name", "NVIDIA H200"}}}}};
  TestServer s(o, &gate);
  ConnectOptions co;
  co.token = kToken;
  co.task_suite_hash = kSuite;
  co.world = 4;
  auto w4 = ConnectEvaluators({{s.url(), {}}}, co);
  ASSERT_FALSE(w4.ok());
  EXPECT_NE(w4.status().message().find("W=2"), std::string::npos) << w4.status().message();
  co.world = 2;
  auto w2 = ConnectEvaluators({{s.url(), {}}}, co);
  ASSERT_TRUE(w2.ok()) << w2.status().ToString();
  EXPECT_EQ(w2->gpu.size(), 2u);
  EXPECT_EQ(w2->hardware["gpus"][0]["name"], "NVIDIA H200");
  co.need_gpu = false;  // a compile-only run takes no GPU slots, whatever their size
  co.world = 4;
  auto compile_only = ConnectEvaluators({{s.url(), {}}}, co);
  ASSERT_TRUE(compile_only.ok());
  EXPECT_TRUE(compile_only->gpu.empty());
}

TEST(Rendezvous, WritesAtomicallyAndListsOnlyRegistrations) {
  auto dir = MakeTempDir("kforge-rendezvous");
  ASSERT_TRUE(dir.ok());
  Registration r;
  r.url = "http://node7:41234";
  r.host = "node7";
  r.pid = 42;
  r.gpu_slots = 4;
  r.compile_slots = 8;
  r.slurm_job = "1234_3";
  ASSERT_TRUE(WriteRegistration(*dir / "1234_3.json", r).ok());
  ASSERT_TRUE(WriteFileAtomic(*dir / "notes.json", "{\"hello\": 1}").ok());
  ASSERT_TRUE(WriteFileAtomic(*dir / "README", "not json").ok());
  auto all = ReadRegistrations(*dir);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].url, "http://node7:41234");
  EXPECT_EQ(all[0].gpu_slots, 4);
  EXPECT_EQ(all[0].compile_slots, 8);
  EXPECT_EQ(all[0].slurm_job, "1234_3");
  EXPECT_EQ(all[0].origin, *dir / "1234_3.json");
  EXPECT_TRUE(ReadRegistrations(*dir / "missing").empty());
  auto endpoints = EndpointsIn(*dir);
  ASSERT_EQ(endpoints.size(), 1u);
  EXPECT_EQ(endpoints[0].registration, *dir / "1234_3.json");
  std::error_code ec;
  fs::remove_all(*dir, ec);
}

}  // namespace
}  // namespace kforge::remote
