// Where an evaluation's ranks run, and the arch its kernels compile for.
#include "run/placement.h"

#include <gtest/gtest.h>

namespace kforge::eval {
namespace {

using nlohmann::json;

Task TaskWithWorlds(std::vector<int> worlds) {
  Task t;
  t.key = "001_test";
  t.world_sizes = std::move(worlds);
  return t;
}

HardwareCard Card(const json& j) {
  auto card = HardwareCardFromJson(j);
  EXPECT_TRUE(card.ok()) << card.status().ToString();
  return card.ok() ? *card : HardwareCard{};
}

HardwareCard CardWithGpus(int n) {
  json gpus = json::array();
  for (int i = 0; i < n; ++i) gpus.push_back({{"index", i}, {"cc_major", 9}, {"cc_minor", 0}});
  return Card({{"gpus", gpus}});
}

TEST(PlacementTest, RanksGoRoundRobinAndSharingIsEmulation) {
  EvalOptions o;
  o.world = 4;
  auto p = Place(TaskWithWorlds({2, 4, 8}), CardWithGpus(2), o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->world, 4);
  EXPECT_EQ(p->devices, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_TRUE(p->emulated);
  o.world = 2;
  p = Place(TaskWithWorlds({2, 4, 8}), CardWithGpus(8), o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->devices, (std::vector<int>{0, 1}));
  EXPECT_FALSE(p->emulated);
}

TEST(PlacementTest, WorldZeroPicksTheSmallestWorldCoveringTheGpus) {
  EvalOptions o;
  auto p = Place(TaskWithWorlds({2, 4, 8}), CardWithGpus(3), o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->world, 4);
  p = Place(TaskWithWorlds({2, 4}), CardWithGpus(8), o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->world, 4);  // more GPUs than any world: the largest
  o.gpus = {5};
  p = Place(TaskWithWorlds({2, 4}), CardWithGpus(8), o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->devices, (std::vector<int>{5, 5}));
}

TEST(PlacementTest, AnUndeclaredWorldOrNoGpuIsAnError) {
  EvalOptions o;
  o.world = 3;
  auto p = Place(TaskWithWorlds({2, 4}), CardWithGpus(4), o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("world size 3"), std::string::npos);
  o.world = 2;
  EXPECT_EQ(Place(TaskWithWorlds({2}), HardwareCard{}, o).status().kind(),
            ErrorKind::kInvalidInput);
}

TEST(PlacementTest, TheNcclSelfTestIsOneRankOnOneRealGpu) {
  EvalOptions o;
  o.nccl_self_test = true;
  // W = 1 is no world size of the task, and that is the point: one GPU can
  // host one NCCL rank.
  auto p = Place(TaskWithWorlds({2, 4, 8}), CardWithGpus(8), o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->world, 1);
  EXPECT_EQ(p->devices, (std::vector<int>{0}));
  EXPECT_FALSE(p->emulated);
  o.gpus = {3};
  p = Place(TaskWithWorlds({2}), CardWithGpus(8), o);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->devices, (std::vector<int>{3}));
  o.world = 2;
  p = Place(TaskWithWorlds({2}), CardWithGpus(8), o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("world 1"), std::string::npos) << p.status().message();
}

TEST(PlacementTest, ArchFollowsTheCardUnlessAsked) {
  EXPECT_EQ(TargetArch(CardWithGpus(1), ""), "sm_90a");
  const HardwareCard ampere = Card({{"gpus", {{{"index", 0}, {"cc_major", 8}, {"cc_minor", 0}}}}});
  EXPECT_EQ(TargetArch(ampere, ""), "sm_80");
  EXPECT_EQ(TargetArch(HardwareCard{}, ""), "sm_90a");
  EXPECT_EQ(TargetArch(ampere, "sm_86"), "sm_86");
}

}  // namespace
}  // namespace kforge::eval
