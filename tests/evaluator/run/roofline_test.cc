// The physical floor of a call and what the timing report does with it: a
// result reports the fraction of the roofline it reached, and a claim under half
// the floor is an integrity violation, whatever the harness's wall clock said.
#include "run/roofline.h"

#include <gtest/gtest.h>

#include <tuple>

#include "run/session.h"

namespace kforge::eval {
namespace {

// One GPU of a card, read as the probe's JSON is.
GpuInfo Gpu(const nlohmann::json& gpu) {
  auto card = HardwareCardFromJson({{"gpus", {gpu}}});
  EXPECT_TRUE(card.ok()) << card.status().ToString();
  return card.ok() ? card->gpus.at(0) : GpuInfo{};
}

GpuInfo H200Card() {
  // What kforge-worker --probe reports for an idle H200: the memory clock it
  // reads may be below the maximum, so the data-sheet bandwidth must win.
  return Gpu({{"name", "NVIDIA H200"},
              {"cc_major", 9},
              {"cc_minor", 0},
              {"hbm_bandwidth_gbps", 1200.0},
              {"nvlink_active_links", 18}});
}

TEST(Roofline, PeaksOfAnH200) {
  Peaks bf16 = PeaksOf(H200Card(), Dtype::kBF16);
  EXPECT_DOUBLE_EQ(bf16.hbm_gbps, 4800.0);
  EXPECT_DOUBLE_EQ(bf16.link_gbps, 450.0);  // 18 links x 25 GB/s per direction
  EXPECT_DOUBLE_EQ(bf16.tflops, 989.5);
  EXPECT_DOUBLE_EQ(PeaksOf(H200Card(), Dtype::kF32).tflops, 494.7);  // TF32 tensor cores
  EXPECT_DOUBLE_EQ(PeaksOf(H200Card(), Dtype::kFp8E4M3).tflops, 1979.0);
  // An unknown GPU has no flops or link peak: those parts of the floor are left out.
  Peaks unknown = PeaksOf(
      Gpu({{"name", "Some GPU"}, {"cc_major", 7}, {"hbm_bandwidth_gbps", 900.0}}), Dtype::kBF16);
  EXPECT_DOUBLE_EQ(unknown.hbm_gbps, 900.0);
  EXPECT_EQ(unknown.link_gbps, 0);
  EXPECT_EQ(unknown.tflops, 0);
}

Problem GemmProblem(int world) {
  Problem p;
  p.world = world;
  // One rank's 4096^3 bf16 GEMM slice: 2 * 4096^3 / W flops, 3 * 32 MiB of HBM, 24 MiB on the
  // links.
  p.floor_flops = 2.0 * 4096 * 4096 * 4096 / world;
  p.floor_hbm_bytes = 3.0 * 32 * 1024 * 1024;
  p.floor_link_bytes = 24.0 * 1024 * 1024;
  return p;
}

TEST(Roofline, FloorIsTheSlowestOfBytesAndFlops) {
  const Peaks peaks = PeaksOf(H200Card(), Dtype::kBF16);
  Floor f = FloorOf(GemmProblem(8), peaks, /*emulated=*/false);
  // flops: 2^37 / 8 / 989.5e6 per us = 17.36 us; HBM 100.7 MB / 4.8e3 = 20.97 us; links 25.2 MB /
  // 450e3 ... = 55.9 us.
  EXPECT_STREQ(f.bound, "link");
  EXPECT_NEAR(f.us, 24.0 * 1024 * 1024 / 450e3, 1e-9);
  // Emulated, the W ranks share one HBM and one set of SMs; links do not exist.
  Floor e = FloorOf(GemmProblem(2), peaks, /*emulated=*/true);
  EXPECT_STREQ(e.bound, "flops");
  EXPECT_NEAR(e.us, 2 * (2.0 * 4096 * 4096 * 4096 / 2) / 989.5e6, 1e-9);
  // No [floor] in the task: no floor.
  EXPECT_EQ(FloorOf(Problem{}, peaks, false).us, 0);
}

// A small message: the bytes term is near zero, and the synchronisation
// rounds times half the probed flag round trip set the floor (emulated too,
// unmultiplied: ranks wait on each other at once); no probe, no such term.
TEST(Roofline, SyncRoundsSetTheFloorOfASmallMessage) {
  HardwareCard card;
  card.flag_round_trip_us = 2.4;
  const GpuInfo gpu = H200Card();
  const Peaks peaks = PeaksOf(card, gpu, Dtype::kBF16);
  EXPECT_DOUBLE_EQ(peaks.sync_round_us, 1.2);
  Problem p;
  p.world = 8;
  p.floor_hbm_bytes = 2 * 1024;
  p.floor_link_bytes = 1024;
  p.floor_sync_rounds = 2;
  for (bool emulated : {false, true}) {
    const Floor f = FloorOf(p, peaks, emulated);
    EXPECT_STREQ(f.bound, "sync");
    EXPECT_DOUBLE_EQ(f.us, 2.4);
  }
  EXPECT_STREQ(FloorOf(p, PeaksOf(HardwareCard{}, gpu, Dtype::kBF16), false).bound, "link");
  // A large message: bytes win again.
  p.floor_hbm_bytes = 1e9;
  EXPECT_STREQ(FloorOf(p, peaks, false).bound, "hbm");
}

TEST(HardwareCard, TheFlagRoundTripRoundTripsThroughJson) {
  HardwareCard card;
  card.flag_round_trip_us = 1.75;
  auto back = HardwareCardFromJson(ToJson(card));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->flag_round_trip_us, 1.75);
  nlohmann::json probe_failed = ToJson(HardwareCard{});
  probe_failed["flag_round_trip"] = {{"error", "no peer access"}};
  back = HardwareCardFromJson(probe_failed);
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->flag_round_trip_us.has_value());
}

// One bench size whose candidate claims `claimed_us` per call (and whose wall
// clock agrees), with a floor of 100 us set through the HBM bytes.
const EvalOptions kDefaults;

void ClaimPerCall(EvalSession& s, double claimed_us) {
  s.options = &kDefaults;
  s.world = 2;
  s.emulated = false;
  s.peaks.hbm_gbps = 1000;  // 1e6 bytes per us
  SizePlan plan;
  plan.size.label = "big";
  plan.problem.world = 2;
  plan.problem.perf_bytes = 1e8;
  plan.problem.floor_hbm_bytes = 1e8;  // 100 us at 1000 GB/s
  plan.baseline.side.claimed_us = std::vector<double>(10, 150.0);
  plan.candidate.claimed_us = std::vector<double>(10, claimed_us);
  plan.candidate.wall_us = std::vector<double>(10, claimed_us + 1.0);
  plan.candidate.gap_us = std::vector<double>(10, 1.0);
  plan.baseline.side.gap_us = std::vector<double>(10, 1.0);
  s.plans.push_back(std::move(plan));
}

// The candidate's 40 claims spread evenly over median * (1 -/+ spread), ten
// levels of four calls each; each wall 1 us over its claim.
void SpreadClaims(EvalSession& s, double median_us, double spread) {
  std::vector<double>& c = s.plans[0].candidate.claimed_us;
  c.clear();
  for (int k = 0; k < 40; ++k) c.push_back(median_us * (1 - spread + 2 * spread * (k % 10) / 9.0));
  s.plans[0].candidate.wall_us.assign(c.size(), 0);
  for (size_t k = 0; k < c.size(); ++k) s.plans[0].candidate.wall_us[k] = c[k] + 1.0;
}

TEST(Roofline, TimingReportsTheFractionAndRejectsTheImpossible) {
  {
    EvalSession s;
    ClaimPerCall(s, 125.0);
    FinishTiming(s);
    ASSERT_EQ(s.timing.size(), 1u);
    EXPECT_TRUE(s.integrity.empty());
    EXPECT_DOUBLE_EQ(s.timing[0]["roofline"]["floor_us"].get<double>(), 100.0);
    EXPECT_EQ(s.timing[0]["roofline"]["bound"], "hbm");
    EXPECT_DOUBLE_EQ(s.timing[0]["roofline"]["fraction"].get<double>(), 0.8);
    EXPECT_TRUE(s.timing[0]["warnings"].empty());
  }
  {
    // 70 us: faster than the floor says, but within its approximations: a warning.
    EvalSession s;
    ClaimPerCall(s, 70.0);
    FinishTiming(s);
    EXPECT_TRUE(s.integrity.empty());
    ASSERT_EQ(s.timing[0]["warnings"].size(), 1u);
    EXPECT_NE(s.timing[0]["warnings"][0].get<std::string>().find("below the task's floor"),
              std::string::npos);
  }
  {
    // 40 us: what a kernel skipping work would claim; the clocks agree, the physics does not.
    EvalSession s;
    ClaimPerCall(s, 40.0);
    FinishTiming(s);
    ASSERT_EQ(s.integrity.size(), 1u);
    EXPECT_EQ(s.integrity[0]["check"], "floor");
    EXPECT_NE(s.integrity[0]["message"].get<std::string>().find(
                  "under half of this call's physical floor"),
              std::string::npos)
        << s.integrity[0].dump();
  }
}

TEST(TimingReport, ReportsEachMediansIntervalAndWarnsWhenTheCapRanOut) {
  EvalSession s;
  ClaimPerCall(s, 125.0);
  // A candidate whose claims spread +-40%: its median is not known to 0.5%.
  SpreadClaims(s, 125.0, 0.4);
  FinishTiming(s);
  ASSERT_EQ(s.timing.size(), 1u);
  const auto& e = s.timing[0];
  const auto ci = e["candidate"]["ci95_us"];
  EXPECT_LT(ci[0].get<double>(), e["candidate"]["median_us"].get<double>());
  EXPECT_GT(ci[1].get<double>(), e["candidate"]["median_us"].get<double>());
  // The baseline is constant: its interval is a point.
  EXPECT_EQ(e["baseline"]["ci95_us"][0], e["baseline"]["ci95_us"][1]);
  const double lo = e["speedup_ci95"][0], hi = e["speedup_ci95"][1];
  EXPECT_LT(lo, e["speedup"].get<double>());
  EXPECT_GT(hi, e["speedup"].get<double>());
  ASSERT_EQ(e["warnings"].size(), 1u);
  EXPECT_NE(e["warnings"][0].get<std::string>().find("candidate's median is known to"),
            std::string::npos);
}

// The cap warning measures a side against the precision it was timed to:
// +-0.5% by default, +-2% where speedups are indicative (EvalSession::Rule),
// so a candidate known to about +-1.3% is a warning at W = 2 and none at
// W = 8 on one GPU.
TEST(TimingReport, TheCapWarningUsesThePrecisionTheSideWasTimedTo) {
  for (const auto& [world, warned] : {std::pair{2, true}, std::pair{8, false}}) {
    EvalSession s;
    ClaimPerCall(s, 125.0);
    s.world = world;
    s.emulated = true;
    s.plans[0].problem.world = world;
    SpreadClaims(s, 125.0, 0.04);
    FinishTiming(s);
    ASSERT_EQ(s.timing.size(), 1u);
    bool cap_warning = false;
    for (const auto& w : s.timing[0]["warnings"])
      cap_warning |=
          w.get<std::string>().find("candidate's median is known to") != std::string::npos;
    EXPECT_EQ(cap_warning, warned) << "W = " << world << ": " << s.timing[0]["warnings"].dump();
    // The entry says which rule timed it.
    const auto& rule = s.timing[0]["rule"];
    EXPECT_DOUBLE_EQ(rule["precision"].get<double>(), world == 8 ? 0.02 : 0.005);
    EXPECT_DOUBLE_EQ(rule["cap_s"].get<double>(), world == 8 ? 0.25 : 0.5);
    EXPECT_EQ(rule["min_calls"].get<int>(), world == 8 ? 10 : 20);
  }
}

// The wall-vs-claim check reads each call's gap (run/stats.h CallGaps): one
// beyond the reference's own gap, the calibrated overhead, 3 us and 3% of the
// claim is an integrity finding; one inside it is none.
TEST(TimingReport, AGapBeyondTheReferencesOwnIsATimingFinding) {
  for (const auto& [gap, flagged] : {std::pair{1.0 + 3.0 + 3.0, false}, std::pair{12.0, true}}) {
    EvalSession s;
    ClaimPerCall(s, 125.0);  // 3% of the claim: 3.75 us
    s.candidate.overhead_us = 1.0;
    s.plans[0].candidate.gap_us.assign(10, gap);
    FinishTiming(s);
    EXPECT_EQ(s.integrity.size(), flagged ? 1u : 0u) << gap;
    if (flagged) {
      EXPECT_EQ(s.integrity[0]["check"], "timing");
    }
    EXPECT_DOUBLE_EQ(s.timing[0]["wall_minus_claimed_us"].get<double>(), gap);
  }
}

// Where more than four ranks share a GPU the gap may exceed the honest path
// by 15% of the claim (speedups there are indicative, +-15%), not 3%: a gap
// 10% over passes there and is a finding at W = 2; one 20% over is a finding
// at both, as is a private stream's (its claim a small part of its wall).
TEST(TimingReport, TheGapsSlackIsTheIndicativeUncertaintyWhereRanksShareAGpu) {
  struct Case {
    int world;
    double claim_us, gap_us;
    bool flagged;
  };
  // ClaimPerCall: path 1 us (the calibrated overhead; no reference gap), so
  // the allowance is 1 + 3 us + the fraction of the claim.
  for (const Case& c : {Case{8, 125.0, 1 + 3 + 12.5, false}, Case{2, 125.0, 1 + 3 + 12.5, true},
                        Case{8, 125.0, 1 + 3 + 25.0, true}, Case{8, 7.6, 50.0, true}}) {
    EvalSession s;
    ClaimPerCall(s, c.claim_us);
    s.world = c.world;
    s.emulated = true;
    s.plans[0].problem.world = c.world;
    s.candidate.overhead_us = 1.0;
    s.plans[0].candidate.gap_us.assign(10, c.gap_us);
    s.plans[0].problem.floor_hbm_bytes = 0;  // the gap alone decides
    FinishTiming(s);
    ASSERT_EQ(s.integrity.size(), c.flagged ? 1u : 0u)
        << "W = " << c.world << ", claim " << c.claim_us << ", gap " << c.gap_us;
    if (c.flagged) {
      EXPECT_EQ(s.integrity[0]["check"], "timing");
    }
  }
}

TEST(TimingReport, MoreThanFourRanksOnOneGpuAreMarkedIndicative) {
  for (const auto& [world, emulated, marked] :
       {std::tuple{8, true, true}, std::tuple{4, true, false}, std::tuple{8, false, false}}) {
    EvalSession s;
    ClaimPerCall(s, 125.0);
    s.world = world;
    s.emulated = emulated;
    s.plans[0].problem.world = world;
    FinishTiming(s);
    bool found = false;
    for (const auto& w : s.timing[0]["warnings"])
      found = found || w.get<std::string>().find("share one GPU") != std::string::npos;
    EXPECT_EQ(found, marked) << "W=" << world << " emulated=" << emulated;
  }
}

}  // namespace
}  // namespace kforge::eval
