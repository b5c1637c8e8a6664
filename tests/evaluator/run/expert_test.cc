// Which expert records an evaluation reuses: beside the same confirmed
// baseline as they are; beside a baseline timed again within 5% of the one
// they were timed beside, rescaled by the two baselines' ratio with that
// ratio's interval; further apart, none (the expert is timed again).
#include "run/expert.h"

#include <gtest/gtest.h>

#include "one_size_session.h"
#include "run/baseline_cache.h"

namespace kforge::eval {
namespace {

using nlohmann::json;

const std::filesystem::path kExpert = "/cache/trusted/kernels/cd34/kernel.so";

struct Fixture : OneSizeSession {
  // Two blocks of 20 calls around `median_us`, 1% apart.
  static Side Calls(double median_us) {
    Side side;
    for (int b = 0; b < 2; ++b) {
      for (int i = 0; i < 20; ++i) {
        const double v = median_us * (b == 0 ? 0.995 : 1.005) * (1 + 0.001 * (i % 5 - 2));
        side.claimed_us.push_back(v);
        side.wall_us.push_back(v + 8);
      }
      side.blocks.push_back(20);
    }
    return side;
  }
  // The baseline of this evaluation (timed now, not a reused record).
  void BaselineAt(double median_us) {
    SizePlan& plan = s.plans[0];
    plan.baseline = BaselineTiming{};
    plan.baseline.side = Calls(median_us);
    plan.expert = ExpertTiming{};
  }
};

TEST(ExpertReuse, ARecordBesideTheSameBaselineIsReusedAsItIs) {
  Fixture f;
  f.BaselineAt(100);
  EXPECT_EQ(ReuseExperts(f.s, kExpert), 1);  // nothing recorded yet
  f.s.plans[0].expert.side = Fixture::Calls(50);
  RecordExperts(f.s, kExpert);
  ASSERT_EQ(f.cache.size(), 1u);
  f.s.plans[0].expert = ExpertTiming{};
  EXPECT_EQ(ReuseExperts(f.s, kExpert), 0);
  const ExpertTiming& x = f.s.plans[0].expert;
  EXPECT_EQ(x.scale, 1.0);
  EXPECT_EQ(x.side.claimed_us, Fixture::Calls(50).claimed_us);
  EXPECT_GE(x.reused_age_s, 0);
  const json e =
      ExpertEntry(f.s.plans[0],
                  Summarize(f.s.plans[0].baseline.side.claimed_us,
                            f.s.plans[0].baseline.side.wall_us, f.s.plans[0].baseline.side.blocks),
                  Summarize(Fixture::Calls(40).claimed_us, Fixture::Calls(40).wall_us,
                            Fixture::Calls(40).blocks));
  EXPECT_TRUE(e["rescaled_by"].is_null()) << e.dump();
  EXPECT_NEAR(e["over_baseline"].get<double>(), 2.0, 0.01);
}

TEST(ExpertReuse, ABaselineTimedAgainWithin5PercentRescalesTheRecordAndWidensItsInterval) {
  Fixture f;
  f.BaselineAt(100);
  f.s.plans[0].expert.side = Fixture::Calls(50);
  RecordExperts(f.s, kExpert);
  const TimingStats raw = Summarize(Fixture::Calls(50).claimed_us, Fixture::Calls(50).wall_us,
                                    Fixture::Calls(50).blocks);

  f.BaselineAt(103);  // the machine's level moved 3%: the reference was timed again
  ASSERT_EQ(ReuseExperts(f.s, kExpert), 0);
  const SizePlan& plan = f.s.plans[0];
  EXPECT_NEAR(plan.expert.scale, 1.03, 1e-3);
  EXPECT_LT(plan.expert.scale_lo, plan.expert.scale);
  EXPECT_GT(plan.expert.scale_hi, plan.expert.scale);
  EXPECT_NEAR(plan.expert.side.claimed_us[0], Fixture::Calls(50).claimed_us[0] * plan.expert.scale,
              1e-9);
  const TimingStats base = Summarize(plan.baseline.side.claimed_us, plan.baseline.side.wall_us,
                                     plan.baseline.side.blocks);
  const Side cand = Fixture::Calls(40);
  const json e = ExpertEntry(plan, base, Summarize(cand.claimed_us, cand.wall_us, cand.blocks));
  ASSERT_TRUE(e["rescaled_by"].is_number()) << e.dump();
  EXPECT_NEAR(e["rescaled_by"].get<double>(), 1.03, 1e-3);
  // The expert over the reference keeps the ratio they were timed at.
  EXPECT_NEAR(e["over_baseline"].get<double>(), 2.0, 0.01);
  EXPECT_NEAR(e["median_us"].get<double>(), raw.median_us * plan.expert.scale, 1e-6);
  // The interval: the record's, rescaled, then widened by the ratio's own.
  EXPECT_LT(e["ci95_us"][0].get<double>(), raw.ci_lo_us * plan.expert.scale - 1e-9);
  EXPECT_GT(e["ci95_us"][1].get<double>(), raw.ci_hi_us * plan.expert.scale + 1e-9);

  f.BaselineAt(94);  // 6% below the baseline the record was timed beside
  EXPECT_EQ(ReuseExperts(f.s, kExpert), 1);
  EXPECT_TRUE(f.s.plans[0].expert.side.claimed_us.empty());
  EXPECT_LT(f.s.plans[0].expert.reused_age_s, 0);
}

TEST(ExpertReuse, ARecordWithoutItsBaselineIsNeverRescaled) {
  Fixture f;
  f.BaselineAt(100);
  BaselineRecord r;  // as stored before records kept their baseline
  r.timing.side = Fixture::Calls(50);
  r.measured = std::chrono::steady_clock::now();
  f.cache.Store(BaselineCache::Key(f.s, f.s.plans[0], kExpert), r);
  EXPECT_EQ(ReuseExperts(f.s, kExpert), 1);
}

}  // namespace
}  // namespace kforge::eval
