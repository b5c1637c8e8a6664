// The job's wire form (kforge.eval_job/1): the evaluation options travel to
// the server as they were asked, and a bad one is refused naming its field.
#include "wire.h"

#include <gtest/gtest.h>

#include "fake_slot.h"
#include "kforge/remote/client.h"

namespace kforge::remote {
namespace {

using namespace testing;  // NOLINT: the fixtures of this test only

wire::JobRequest Request(bool compile_only, bool profile) {
  wire::JobRequest r;
  r.job = {"001_allreduce", "src", "k.cu", 2, "bf16", compile_only};
  r.job.profile = profile;
  r.task_suite_hash = kSuite;
  r.kforge_version = "1";
  r.id = "job-1";
  return r;
}

TEST(JobWire, EveryOptionSurvivesTheRoundTrip) {
  for (bool compile_only : {false, true}) {
    for (bool profile : {false, true}) {
      SCOPED_TRACE(::testing::Message() << compile_only << profile);
      auto back =
          wire::ParseJobRequest(wire::JobRequestJson(Request(compile_only, profile)).dump());
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(back->job.task, "001_allreduce");
      EXPECT_EQ(back->job.world, 2);
      EXPECT_EQ(back->job.dtype, "bf16");
      EXPECT_EQ(back->job.compile_only, compile_only);
      EXPECT_EQ(back->job.profile, profile);
    }
  }
}

TEST(JobWire, ProfileIsOptionalAndBoolean) {
  nlohmann::json body = wire::JobRequestJson(Request(false, true));
  body["job"].erase("profile");
  auto absent = wire::ParseJobRequest(body.dump());
  ASSERT_TRUE(absent.ok()) << absent.status().ToString();
  EXPECT_FALSE(absent->job.profile);
  body["job"]["profile"] = "yes";
  auto bad = wire::ParseJobRequest(body.dump());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_EQ(bad.status().message(), "job field 'profile': expected true or false");
}

// The run's timing cap travels with the job; absent (an older client) or 0,
// the server's evaluator's own; outside 0.01-600 s, refused naming the field.
TEST(JobWire, TheTimingCapTravelsWithinTheEvaluatorsRange) {
  wire::JobRequest r = Request(false, false);
  r.job.timing_cap_s = 0.2;
  nlohmann::json body = wire::JobRequestJson(r);
  auto back = wire::ParseJobRequest(body.dump());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->job.timing_cap_s, 0.2);
  body["job"].erase("timing_cap_s");
  auto absent = wire::ParseJobRequest(body.dump());
  ASSERT_TRUE(absent.ok()) << absent.status().ToString();
  EXPECT_EQ(absent->job.timing_cap_s, 0);
  for (const nlohmann::json& bad :
       {nlohmann::json(0.001), nlohmann::json(601), nlohmann::json(-1), nlohmann::json("0.2")}) {
    body["job"]["timing_cap_s"] = bad;
    auto refused = wire::ParseJobRequest(body.dump());
    ASSERT_FALSE(refused.ok()) << bad.dump();
    EXPECT_EQ(refused.status().kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(refused.status().message().find("job field 'timing_cap_s'"), std::string::npos)
        << refused.status().message();
  }
}

// A red-team run's canary travels with the job; absent (an older client),
// none; anything but a canary token is refused naming the field.
TEST(JobWire, TheCanaryTravelsAndOnlyAsACanaryToken) {
  const std::string canary = "kforge-canary-00112233445566778899aabbccddeeff";
  wire::JobRequest r = Request(false, false);
  r.job.canary = canary;
  nlohmann::json body = wire::JobRequestJson(r);
  auto back = wire::ParseJobRequest(body.dump());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->job.canary, canary);
  body["job"].erase("canary");
  auto absent = wire::ParseJobRequest(body.dump());
  ASSERT_TRUE(absent.ok()) << absent.status().ToString();
  EXPECT_EQ(absent->job.canary, "");
  for (const nlohmann::json& bad :
       {nlohmann::json(42), nlohmann::json("kforge-canary-xyz"),
        nlohmann::json(canary + "\nEXTRA=1"), nlohmann::json(std::string(10000, 'a'))}) {
    body["job"]["canary"] = bad;
    auto refused = wire::ParseJobRequest(body.dump());
    ASSERT_FALSE(refused.ok()) << bad.dump();
    EXPECT_EQ(refused.status().kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(refused.status().message().find("job field 'canary'"), std::string::npos)
        << refused.status().message();
  }
}

// A server of one slot of two GPUs at W = 2, and a client's port to it.
EvalServerOptions OneSlotOfW2() {
  EvalServerOptions o = Options();
  o.gpu_sets = {{0, 1}};
  o.world = 2;
  return o;
}
RemotePortOptions PortTo(const TestServer& s) {
  RemotePortOptions port;
  port.url = s.url();
  port.token = kToken;
  port.task_suite_hash = kSuite;
  port.timeout_s = 30;
  return port;
}

// Through a real server on loopback: the slot that runs the job sees the
// profile asked for, and its document comes back with it.
TEST(JobWire, TheServersSlotSeesTheProfileAskedFor) {
  Gate gate;
  gate.Open();
  TestServer s(OneSlotOfW2(), &gate);
  auto service = MakeRemoteEvalService(PortTo(s));
  eval::EvalRequest job{"001_allreduce", "profiled", "k.cu", 2, "", false};
  job.profile = true;
  auto profiled = service->Evaluate(job);
  ASSERT_TRUE(profiled.ok()) << profiled.status().ToString();
  EXPECT_EQ((*profiled)["profile"]["skipped"], "fake slot") << profiled->dump();
  job.profile = false;
  job.source = "plain";
  auto plain = service->Evaluate(job);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE(plain->contains("profile")) << plain->dump();
}

TEST(JobWire, TheServersSlotSeesTheCanaryAskedFor) {
  Gate gate;
  gate.Open();
  TestServer s(OneSlotOfW2(), &gate);
  auto service = MakeRemoteEvalService(PortTo(s));
  eval::EvalRequest job{"001_allreduce", "canaried", "k.cu", 2, "", false};
  job.canary = "kforge-canary-00112233445566778899aabbccddeeff";
  auto doc = service->Evaluate(job);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_EQ((*doc)["fake_slot_canary"], job.canary) << doc->dump();
}

}  // namespace
}  // namespace kforge::remote
