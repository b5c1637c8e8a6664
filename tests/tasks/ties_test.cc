// Ties: task 024's answer depends on which expert a top-k gives a token when
// two logits are equal. Its logits are generated with init.distinct, so no row
// has a tie, and an honest kernel that breaks ties toward the higher expert
// index computes exactly what one breaking them toward the lower does; without
// `distinct`, the two differ beyond the task's tolerance in most trials (the
// bug this guards against). A wrong k is refused either way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "kforge/evaluator/task.h"
#include "kforge/oracle.h"
#include "task/inputs.h"

namespace kforge::eval {
namespace {

const Task& LoadBalancingTask() {
  static const Task task = [] {
    auto t = LoadTask(std::filesystem::path(KFORGE_TEST_TASKS_DIR) / "024_load_balancing_loss");
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? *t : Task{};
  }();
  return task;
}

// The loss with the oracle's tie-break (lower expert index) and, on the same
// logits with the experts in reverse order, the higher-index tie-break.
std::pair<double, double> LossBothTieBreaks(const Problem& p, uint64_t seed) {
  auto io = BuildOracleIo(p, seed, {});
  EXPECT_TRUE(io.ok()) << io.status().ToString();
  OracleIo reversed = *io;
  for (int r = 0; r < p.world; ++r) {
    auto& x = reversed.inputs[r][0];
    const int64_t experts = x.shape[1];
    for (int64_t t = 0; t < x.shape[0]; ++t)
      std::reverse(x.data.begin() + t * experts, x.data.begin() + (t + 1) * experts);
  }
  EXPECT_TRUE(RunOracle(p, *io).ok());
  EXPECT_TRUE(RunOracle(p, reversed).ok());
  return {io->out(0, "loss")[0], reversed.out(0, "loss")[0]};
}

Problem Instance(const Task& t, int world, const char* n, const char* e) {
  auto p = Instantiate(t, world, Dtype::kBF16, SizeSpec{"ties", {{"N", n}, {"E", e}}}, true);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : Problem{};
}

TEST(Ties, LoadBalancingLossLogitsHaveNoTiesSoEitherTieBreakPasses) {
  const Task& t = LoadBalancingTask();
  ASSERT_TRUE(t.inputs.at(0).init.distinct);
  for (int world : {2, 8}) {
    const Problem p = Instance(t, world, "4096", "8");
    const double rtol = p.outputs[0].tolerance.rtol;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      auto host = GenerateAllInputs(p, seed);
      ASSERT_TRUE(host.ok());
      for (int r = 0; r < world; ++r) {
        const auto& bytes = (*host)[r][0];
        for (int64_t row = 0; row < 4096; ++row) {
          std::vector<double> v(8);
          for (int e = 0; e < 8; ++e) v[e] = LoadAsDouble(bytes.data(), Dtype::kBF16, row * 8 + e);
          std::sort(v.begin(), v.end());
          ASSERT_EQ(std::adjacent_find(v.begin(), v.end()), v.end())
              << "seed " << seed << " rank " << r << " row " << row;
        }
      }
      const auto [low, high] = LossBothTieBreaks(p, seed);
      // The same top-k either way: equal up to the order of the fp64 sums.
      EXPECT_NEAR(low, high, 1e-12 * std::fabs(low)) << "seed " << seed;
      // A wrong k is far outside the tolerance.
      Problem k1 = p;
      k1.vars["top_k"] = 1;
      auto io = BuildOracleIo(k1, seed, {});
      ASSERT_TRUE(io.ok());
      ASSERT_TRUE(RunOracle(k1, *io).ok());
      EXPECT_GT(std::fabs(io->out(0, "loss")[0] - low), 10 * rtol * std::fabs(low));
    }
  }
}

TEST(Ties, WithoutDistinctLogitsTheTieBreakChangesTheLossBeyondTheTolerance) {
  Task t = LoadBalancingTask();
  t.inputs.at(0).init.distinct = false;
  const Problem p = Instance(t, 2, "4096", "8");
  const double rtol = p.outputs[0].tolerance.rtol;
  int beyond = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const auto [low, high] = LossBothTieBreaks(p, seed);
    beyond += std::fabs(high - low) > rtol * std::fabs(low);
  }
  EXPECT_GE(beyond, 5) << "bf16 logits tie at the top-k boundary in ~1% of rows";
}

}  // namespace
}  // namespace kforge::eval
