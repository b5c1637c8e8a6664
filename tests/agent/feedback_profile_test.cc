// The profile in the feedback: a hand-built document of a correct but slow
// allreduce at W = 8 on H100s (golden/slow_profile.eval.json, with the metric
// names the worker collects and an H100's values) rendered through the
// shipped slow and fast templates.
#include "feedback_profile.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "feedback.h"
#include "test_util.h"

namespace kforge::agent {
namespace {

using nlohmann::json;

const std::filesystem::path kRoot(KFORGE_SOURCE_ROOT);

json SlowProfiledDoc() {
  std::ifstream f(kRoot / "tests/agent/golden/slow_profile.eval.json");
  std::stringstream text;
  text << f.rdbuf();
  json doc = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(doc.is_object());
  return doc;
}

std::string Compose(const json& doc, Outcome outcome = Outcome::kSlow) {
  static const Strategy s = testing::MakeStrategy("turns = 4\nprofile = true\n");
  FeedbackInput in;
  in.outcome = outcome;
  in.eval = doc;
  in.turn = 1;
  in.turns = 4;
  auto r = ComposeFeedback(s, in);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : "";
}

// The section the model reads for golden/slow_profile.eval.json: every number
// is the document's, the stall shares are of the eight reasons measured
// (14.2 + 3.1 + 0.6 + ... = 18.62 stalled warps per issued instruction).
const char* const kProfileSection =
    "\n"
    "Profile at 256MiB (rank 0's hardware counters, read during extra calls after the timed "
    "ones; advice, not part of the timing):\n"
    "- DRAM throughput: 34.3% of peak (2.15 GB read, 268.0 MB written per call)\n"
    "- L2 hit rate: 12.4%\n"
    "- achieved occupancy: 31.6% of the SM's maximum warps were active\n"
    "- SM throughput: 9.8% of peak\n"
    "- where warps stall (shares of the 8 stall reasons measured): long_scoreboard 76% (waiting "
    "for a global or local memory load), lg_throttle 17% (the global/local memory instruction "
    "queue is full), wait 3% (a fixed-latency dependency)\n";

TEST(FeedbackProfile, SlowAndFastShowTheCondensedProfile) {
  const json doc = SlowProfiledDoc();
  for (Outcome o : {Outcome::kSlow, Outcome::kFast}) {
    const std::string fb = Compose(doc, o);
    EXPECT_NE(fb.find(kProfileSection), std::string::npos) << fb;
    EXPECT_EQ(fb.find("membar"), std::string::npos) << "a stall of 0 is no reason\n" << fb;
    EXPECT_EQ(fb.find("block barrier"), std::string::npos) << "three stalls at most\n" << fb;
  }
}

// The same slow evaluation with and without its profile: the model is told
// exactly the profile's lines more, between what ptxas said and the request
// for the next kernel, and nothing else changes.
TEST(FeedbackProfile, TheProfileIsWhatChangesInTheNextPrompt) {
  json doc = SlowProfiledDoc();
  const std::string with = Compose(doc);
  doc.erase("profile");
  const std::string without = Compose(doc);
  EXPECT_EQ(without.find("Profile"), std::string::npos) << without;
  EXPECT_EQ(without.find("DRAM"), std::string::npos) << without;
  const size_t at = without.find("\nKeep it correct and make it faster");
  ASSERT_NE(at, std::string::npos) << without;
  EXPECT_EQ(with, without.substr(0, at) + kProfileSection + without.substr(at));
  EXPECT_NE(with.find("- RankBarrier(kf_buffer, int, int): 12 registers"), std::string::npos)
      << with;
}

TEST(FeedbackProfile, ASkippedProfileSaysWhyOnOneLine) {
  json doc = SlowProfiledDoc();
  doc["profile"] = {{"size", "256MiB"},
                    {"rank", 0},
                    {"skipped", "cannot load CUPTI (libcupti.so):\nnot found\x1b[2K"}};
  const std::string fb = Compose(doc);
  EXPECT_NE(fb.find("Profile at 256MiB (rank 0's hardware counters, read during extra calls "
                    "after the timed ones; advice, not part of the timing):\n"
                    "- skipped, no counters this time: cannot load CUPTI (libcupti.so): not "
                    "found\n"),
            std::string::npos)
      << fb;
  EXPECT_EQ(fb.find("DRAM"), std::string::npos) << fb;
  EXPECT_EQ(fb.find('\x1b'), std::string::npos) << fb;
}

// Only the metrics present become lines; a metric absent from the document
// is never shown, and a profile with none of them shows no section.
TEST(FeedbackProfile, OnlyTheMetricsPresentAreShown) {
  json only = {{"profile",
                {{"size", "1MiB"},
                 {"metrics",
                  {{"lts__t_sector_hit_rate.pct", 88.0},
                   {"dram__bytes_read.sum", 4.2e6},
                   {"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", 1.5},
                   {"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio", 0.5}}}}}};
  const json view = ProfileView(only);
  ASSERT_TRUE(view.is_object()) << view.dump();
  EXPECT_EQ(view["size"], "1MiB");
  EXPECT_EQ(view["lines"],
            json({"DRAM traffic: 4.2 MB read per call", "L2 hit rate: 88.0%",
                  "where warps stall (shares of the 2 stall reasons measured): barrier 75% "
                  "(waiting at a block barrier), wait 25% (a fixed-latency dependency)"}));

  json none = {{"profile", {{"size", "1MiB"}, {"metrics", {{"gpu__time_duration.sum", 2.1e4}}}}}};
  EXPECT_TRUE(ProfileView(none).is_null());
  EXPECT_TRUE(ProfileView(json{{"status", "passed"}}).is_null());
  EXPECT_TRUE(ProfileView(json{{"profile", "odd"}}).is_null());
}

}  // namespace
}  // namespace kforge::agent
