// What a run asks each evaluation for beside the kernel, on fake time: a
// strategy with `profile = true` (every GPU evaluation asks for the profile,
// compiles never do, and the next turn's prompt carries it), and the run's
// timing cap.
#include <gtest/gtest.h>

#include "fakes.h"
#include "kforge/agent/runner.h"
#include "test_util.h"

namespace kforge::agent {
namespace {

using testing::FakeEval;
using testing::FakeLlm;
using testing::FakeStore;

struct ProfileRun {
  std::vector<TurnRecord> turns;
  int gpu_evaluations = 0, gpu_profiled = 0, compiles = 0, compiles_profiled = 0;
  std::vector<double> gpu_timing_caps;
};

// One model, one task, two turns: a slow kernel, then a faster one.
// `run_profile`: the run's --profile (RunSpec::profile).
// `timing_cap_s`: the run's --timing-cap (RunSpec::timing_cap_s).
ProfileRun RunTwoTurns(const std::string& strategy_toml, bool run_profile = false,
                       double timing_cap_s = 0) {
  const Strategy strategy = testing::MakeStrategy(strategy_toml);
  FakeLlm llm(30);
  llm.SetTags({{{"001_task", 0}, "SLOW"}, {{"001_task", 1}, "FAST1.5"}});
  FakeEval gpu(10), compiler(2);
  gpu.profile = {{"size", "1MiB"},
                 {"rank", 0},
                 {"calls", 12},
                 {"metrics",
                  {{"dram__throughput.avg.pct_of_peak_sustained_elapsed", 3.1},
                   {"sm__warps_active.avg.pct_of_peak_sustained_active", 6.2}}}};
  FakeStore store;
  FakeClock clock;
  RunSpec spec;
  spec.name = "profile";
  spec.models = {"fake:a"};
  spec.tasks = {{"001_task", "collective", {"SYS", "PROMPT"}}};
  spec.strategy = &strategy;
  spec.pools.gpu_sets = 1;
  spec.pools.compile_slots = 1;
  spec.profile = run_profile;
  spec.timing_cap_s = timing_cap_s;
  auto executor = MakeSimExecutor(clock);
  RunDeps deps;
  deps.llm = &llm;
  deps.gpu_sets = {&gpu};
  deps.compilers = {&compiler};
  deps.store = &store;
  deps.clock = &clock;
  deps.executor = executor.get();
  auto r = ExecuteRun(spec, deps);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  ProfileRun out;
  EXPECT_EQ(store.sessions.size(), 1u);
  if (!store.sessions.empty()) out.turns = store.sessions.begin()->second.turns;
  out.gpu_evaluations = gpu.evaluations;
  out.gpu_profiled = gpu.profiled;
  out.compiles = compiler.evaluations;
  out.compiles_profiled = compiler.profiled;
  out.gpu_timing_caps = gpu.timing_caps;
  return out;
}

TEST(RunnerProfile, EveryGpuEvaluationAsksAndTheNextPromptShowsIt) {
  const ProfileRun run = RunTwoTurns("turns = 2\nprofile = true\n");
  ASSERT_EQ(run.turns.size(), 2u);
  EXPECT_EQ(run.gpu_evaluations, 2);
  EXPECT_EQ(run.gpu_profiled, 2);
  EXPECT_EQ(run.compiles, 2);
  EXPECT_EQ(run.compiles_profiled, 0);
  // Turn 2 is asked with turn 1's feedback, which carries the profile.
  const std::string& prompt = run.turns[1].prompt;
  EXPECT_EQ(prompt, run.turns[0].feedback);
  EXPECT_NE(prompt.find("not faster than the baseline"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("Profile at 1MiB (rank 0's hardware counters"), std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("- DRAM throughput: 3.1% of peak\n"
                        "- achieved occupancy: 6.2% of the SM's maximum warps were active\n"),
            std::string::npos)
      << prompt;
}

// `kforge run --profile`: every GPU evaluation asks for the profile whatever
// the strategy says (this one says nothing), compiles still never do, and
// the next prompt carries it.
TEST(RunnerProfile, TheRunsFlagProfilesEveryGpuEvaluationWhateverTheStrategySays) {
  const ProfileRun run = RunTwoTurns("turns = 2\n", /*run_profile=*/true);
  ASSERT_EQ(run.turns.size(), 2u);
  EXPECT_EQ(run.gpu_evaluations, 2);
  EXPECT_EQ(run.gpu_profiled, 2);
  EXPECT_EQ(run.compiles, 2);
  EXPECT_EQ(run.compiles_profiled, 0);
  EXPECT_NE(run.turns[1].prompt.find("Profile at 1MiB (rank 0's hardware counters"),
            std::string::npos)
      << run.turns[1].prompt;
}

TEST(RunnerProfile, WithoutTheOptionNothingIsProfiledOrShown) {
  const ProfileRun run = RunTwoTurns("turns = 2\n");
  ASSERT_EQ(run.turns.size(), 2u);
  EXPECT_EQ(run.gpu_evaluations, 2);
  EXPECT_EQ(run.gpu_profiled, 0);
  EXPECT_EQ(run.turns[1].prompt.find("Profile"), std::string::npos) << run.turns[1].prompt;
}

// `kforge run --timing-cap 0.2`: every GPU evaluation is asked for it;
// without the flag, for the evaluator's own (0).
TEST(RunnerTimingCap, EveryGpuEvaluationCarriesTheRunsCap) {
  const ProfileRun capped = RunTwoTurns("turns = 2\n", false, 0.2);
  EXPECT_EQ(capped.gpu_timing_caps, (std::vector<double>{0.2, 0.2}));
  const ProfileRun plain = RunTwoTurns("turns = 2\n");
  EXPECT_EQ(plain.gpu_timing_caps, (std::vector<double>{0, 0}));
}

}  // namespace
}  // namespace kforge::agent
