// The messages between the coordinator and the workers: what a drive reply
// and a shared arena may carry, and what a malformed one is refused for.
#include "protocol/messages.h"

#include <gtest/gtest.h>

#include <limits>

namespace kforge::eval::proto {
namespace {

DriveReply TwoCalls() {
  DriveReply d;
  d.wall_us = {31.5, 30.9};
  d.claimed_us = {29.0, 28.7};
  d.sm_clock_mhz = {1980, 1965};
  d.temperature_c = {41, 43};
  d.split = {.round_us = 900, .stage_us = 120.5, .verify_us = 80, .barrier_us = 12};
  return d;
}

TEST(DriveReplyTest, CarriesTimesAndTheClocksAroundTheCalls) {
  auto back = DriveReply::Parse(TwoCalls().ToJson(), "drive", 2);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->wall_us, (std::vector<double>{31.5, 30.9}));
  EXPECT_EQ(back->claimed_us, (std::vector<double>{29.0, 28.7}));
  EXPECT_EQ(back->sm_clock_mhz, (std::vector<double>{1980, 1965}));
  EXPECT_EQ(back->temperature_c, (std::vector<double>{41, 43}));
  EXPECT_EQ(back->split.round_us, 900);
  EXPECT_EQ(back->split.stage_us, 120.5);
  EXPECT_EQ(back->split.verify_us, 80);
  EXPECT_EQ(back->split.barrier_us, 12);
}

TEST(DriveReplyTest, ASplitWithANegativeTimeIsRefused) {
  nlohmann::json j = TwoCalls().ToJson();
  j["split_us"]["verify"] = -1;
  auto back = DriveReply::Parse(j, "drive", 2);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("split_us"), std::string::npos) << back.status().message();
}

TEST(DriveReplyTest, AReplyWithoutNvmlReadingsIsValid) {
  DriveReply d = TwoCalls();
  d.sm_clock_mhz.clear();
  d.temperature_c.clear();
  auto back = DriveReply::Parse(d.ToJson(), "drive", 2);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back->sm_clock_mhz.empty());
}

TEST(DriveReplyTest, MoreThanTwoClockReadingsAreRefused) {
  nlohmann::json j = TwoCalls().ToJson();
  j["sm_clock_mhz"] = {1980, 1970, 1960};
  auto back = DriveReply::Parse(j, "drive", 2);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("sm_clock_mhz"), std::string::npos)
      << back.status().message();
}

TEST(DriveReplyTest, TimesForTooFewCallsAreRefused) {
  auto back = DriveReply::Parse(TwoCalls().ToJson(), "drive", 3);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("2 times for 3 calls"), std::string::npos)
      << back.status().message();
}

TEST(DriveReplyTest, AClockReadingThatIsNotANumberIsRefused) {
  nlohmann::json j = TwoCalls().ToJson();
  j["temperature_c"] = {"hot"};
  EXPECT_FALSE(DriveReply::Parse(j, "drive", 2).ok());
}

// A profiled serve's reply comes from the candidate's process: only the
// metrics asked for, each a finite number, and a bounded error text.
TEST(ServeReplyTest, CarriesTheMetricsAskedFor) {
  ServeReply r;
  r.profile = {{"dram__bytes_read.sum", 2.685e8}, {"gpu__time_duration.sum", 2.589e5}};
  auto back = ServeReply::Parse(r.ToJson(), "serve");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->profile.size(), 2u);
  EXPECT_TRUE(back->profile_error.empty());
}

TEST(ServeReplyTest, AnUnknownMetricOrAValueThatIsNotANumberIsRefused) {
  for (const char* body : {R"({"profile": {"my__made_up.sum": 1.0}})",
                           R"({"profile": {"dram__bytes_read.sum": "1e9"}})",
                           R"({"profile": {"dram__bytes_read.sum": null}})",
                           R"({"profile": [1, 2]})", R"({"profile_error": 7})"}) {
    auto r = ServeReply::Parse(nlohmann::json::parse(body), "serve");
    EXPECT_FALSE(r.ok()) << body;
  }
  // No profile at all (an unprofiled serve) is a valid, empty reply.
  auto empty = ServeReply::Parse(nlohmann::json::object(), "serve");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->profile.empty());
}

TEST(ServeReplyTest, MoreMetricsThanNamedAreRefused) {
  nlohmann::json p = nlohmann::json::object();
  for (const auto& n : ProfileMetricNames()) p[n] = 1.0;
  EXPECT_TRUE(ServeReply::Parse({{"profile", p}}, "serve").ok());
  // JSON objects cannot repeat a key, so "more" is only possible with an
  // unknown one: refused by name.
  p["extra__metric.sum"] = 1.0;
  EXPECT_FALSE(ServeReply::Parse({{"profile", p}}, "serve").ok());
}

TEST(ServeRequestTest, ProfileIsOptionalAndMustBeABool) {
  auto plain = ServeRequest::Parse({{"op", "serve"}, {"calls", 3}});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->profile);
  auto asked = ServeRequest::Parse(ServeRequest{12, true}.ToJson());
  ASSERT_TRUE(asked.ok());
  EXPECT_TRUE(asked->profile);
  EXPECT_EQ(asked->calls, 12);
  EXPECT_FALSE(ServeRequest::Parse({{"op", "serve"}, {"calls", 3}, {"profile", 1}}).ok());
}

TEST(ArenaShareTest, AnArenaIsSharedEitherThroughIpcOrSplit) {
  ArenaShare ipc{"00ff", 4u << 20, 0};
  ArenaShare split{"", 6u << 20, 2u << 20};
  for (const ArenaShare& a : {ipc, split}) {
    auto back = ArenaShare::Parse(a.ToJson(), "share");
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->ipc_handle, a.ipc_handle);
    EXPECT_EQ(back->bytes, a.bytes);
    EXPECT_EQ(back->readonly_bytes, a.readonly_bytes);
    EXPECT_EQ(back->split(), a.readonly_bytes > 0);
  }
  // Neither, both, or a read-only part that is the whole arena.
  EXPECT_FALSE(ArenaShare::Parse(ArenaShare{"", 4u << 20, 0}.ToJson(), "share").ok());
  EXPECT_FALSE(ArenaShare::Parse(ArenaShare{"00ff", 6u << 20, 2u << 20}.ToJson(), "share").ok());
  EXPECT_FALSE(ArenaShare::Parse(ArenaShare{"", 2u << 20, 2u << 20}.ToJson(), "share").ok());
}

TEST(ArenaShareTest, AnAttachCountsTwoDescriptorsPerSplitArena) {
  AttachRequest a;
  a.arenas = {{"", 6u << 20, 2u << 20}, {"", 6u << 20, 2u << 20}, {"", 6u << 20, 2u << 20}};
  a.nccl_id = "ab";
  auto back = AttachRequest::Parse(a.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->arenas.size(), 3u);
  EXPECT_EQ(back->Descriptors(), 6u);
  EXPECT_EQ(back->nccl_id, "ab");
  a.arenas = {{"00ff", 4u << 20, 0}};
  EXPECT_EQ(a.Descriptors(), 0u);
}

TEST(ArenaShareTest, AnAllocReplySaysWhyItsArenaIsNotSplit) {
  AllocReply r;
  r.private_handle = "aa";
  r.private_bytes = 1u << 20;
  r.candidate = {"bb", 4u << 20, 0};
  r.readonly_refused = "the device cannot export memory as POSIX file descriptors";
  auto back = AllocReply::Parse(r.ToJson(), "alloc");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->candidate.ipc_handle, "bb");
  EXPECT_EQ(back->readonly_refused, r.readonly_refused);
  // A read-only part larger than the arena asked for is refused.
  AllocRequest q{1u << 20, 4u << 20, 6u << 20};
  EXPECT_FALSE(AllocRequest::Parse(q.ToJson()).ok());
  q.candidate_readonly_bytes = 2u << 20;
  auto asked = AllocRequest::Parse(q.ToJson());
  ASSERT_TRUE(asked.ok());
  EXPECT_EQ(asked->candidate_readonly_bytes, 2u << 20);
}

// A problem of world 2 with one input and two outputs of 4096 f32 each.
Problem TwoOutputs() {
  Problem p;
  p.world = 2;
  p.dtype = Dtype::kF32;
  ConcreteTensor t;
  t.dtype = Dtype::kF32;
  t.shape = {4096};
  t.numel = 4096;
  t.nbytes = 4096 * 4;
  t.name = "x";
  p.inputs.push_back(t);
  t.name = "y";
  t.tolerance = {1e-2, 1e-2, 0.0047};
  p.outputs.push_back(t);
  t.name = "z";
  t.tolerance = {1e-2, 1e-2, 0};
  p.outputs.push_back(t);
  return p;
}

TEST(ConfigureRequestTest, CarriesTheRmsBoundsAgainstTheBaseline) {
  ConfigureRequest c;
  c.problem = TwoOutputs();
  c.sets = 3;
  c.collectives = true;
  c.rms_vs_baseline = {0.0055, 0};
  auto back = ConfigureRequest::Parse(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->rms_vs_baseline, (std::vector<double>{0.0055, 0}));
  EXPECT_EQ(back->sets, 3);
  ASSERT_EQ(back->problem.outputs.size(), 2u);
  EXPECT_DOUBLE_EQ(back->problem.outputs[0].tolerance.rms, 0.0047);
  // Absent (nothing measured, or a candidate's configure): empty.
  c.rms_vs_baseline.clear();
  EXPECT_FALSE(c.ToJson().contains("rms_vs_baseline"));
  back = ConfigureRequest::Parse(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->rms_vs_baseline.empty());
}

TEST(ConfigureRequestTest, RmsBoundsMustBeOnePerOutputFiniteAndNotNegative) {
  ConfigureRequest c;
  c.problem = TwoOutputs();
  nlohmann::json j = c.ToJson();
  j["rms_vs_baseline"] = {0.0055};
  EXPECT_FALSE(ConfigureRequest::Parse(j).ok());
  j["rms_vs_baseline"] = {0.0055, 0, 0};
  EXPECT_FALSE(ConfigureRequest::Parse(j).ok());
  j["rms_vs_baseline"] = {-0.001, 0};
  EXPECT_FALSE(ConfigureRequest::Parse(j).ok());
  j["rms_vs_baseline"] = {"0.005", 0};
  EXPECT_FALSE(ConfigureRequest::Parse(j).ok());
  j["rms_vs_baseline"] = {std::numeric_limits<double>::infinity(), 0};
  EXPECT_FALSE(ConfigureRequest::Parse(j).ok());
  j["rms_vs_baseline"] = {0.0055, 0};
  EXPECT_TRUE(ConfigureRequest::Parse(j).ok());
}

TEST(ReadOutputsRequestTest, AsksForTheBaselinesOutputsOrTheCandidates) {
  ReadOutputsRequest r;
  r.set = 1;
  auto plain = ReadOutputsRequest::Parse(r.ToJson(), 2);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->baseline);
  EXPECT_EQ(plain->set, 1);
  r.baseline = true;
  auto base = ReadOutputsRequest::Parse(r.ToJson(), 2);
  ASSERT_TRUE(base.ok());
  EXPECT_TRUE(base->baseline);
  EXPECT_FALSE(
      ReadOutputsRequest::Parse({{"op", "read_outputs"}, {"set", 0}, {"baseline", 1}}, 2).ok());
}

}  // namespace
}  // namespace kforge::eval::proto
