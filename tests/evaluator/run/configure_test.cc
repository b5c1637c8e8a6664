// The configure messages every group gets for a size: the harness's and the
// served groups' must agree on everything the arena layout depends on, or a
// rank's offsets would not be its peers'.
#include <gtest/gtest.h>

#include "protocol/messages.h"
#include "run/session.h"
#include "task_fixture.h"

namespace kforge::eval {
namespace {

TEST(ConfigureMessages, EveryGroupGetsTheSameLayoutInputs) {
  testing::TempDir tmp;
  Task task = testing::LoadOrDie(tmp.path(), "001_sum", testing::SumToml());
  EvalOptions options;
  EvalSession s;
  s.task = &task;
  s.dtype = Dtype::kF32;
  s.world = 2;
  s.emulated = true;
  s.options = &options;
  s.candidate_arenas = {{"", 6u << 20, 2u << 20}, {"", 6u << 20, 2u << 20}};
  for (bool check : {true, false}) {
    const SizeSpec& size = check ? task.check_sizes.front() : task.bench_sizes.front();
    SizePlan plan;
    plan.size = size;
    plan.check = check;
    auto p = Instantiate(task, 2, Dtype::kF32, size, plan.check);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    plan.problem = *p;
    plan.sets = 3;
    auto harness = proto::ConfigureRequest::Parse(HarnessConfigureMessage(s, plan));
    auto served = proto::ConfigureRequest::Parse(ConfigureMessage(s, plan, false));
    ASSERT_TRUE(harness.ok()) << harness.status().ToString();
    ASSERT_TRUE(served.ok()) << served.status().ToString();
    EXPECT_EQ(harness->readonly_bytes, 2u << 20) << size.label;
    EXPECT_EQ(served->readonly_bytes, harness->readonly_bytes) << size.label;
    EXPECT_EQ(served->sets, harness->sets);
    EXPECT_EQ(served->emulated, harness->emulated);
  }
  // Arenas shared through CUDA IPC: no read-only part for anyone.
  s.candidate_arenas = {{"00ff", 4u << 20, 0}, {"00ee", 4u << 20, 0}};
  SizePlan plan;
  plan.size = task.check_sizes.front();
  plan.check = true;
  plan.problem = *Instantiate(task, 2, Dtype::kF32, plan.size, true);
  EXPECT_EQ(proto::ConfigureRequest::Parse(HarnessConfigureMessage(s, plan))->readonly_bytes, 0u);
}

}  // namespace
}  // namespace kforge::eval
