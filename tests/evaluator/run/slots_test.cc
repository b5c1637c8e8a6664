// A machine cut into evaluation slots (kforge/evaluator/slots.h).
#include "kforge/evaluator/slots.h"

#include <gtest/gtest.h>

namespace kforge::eval {
namespace {

// Consecutive sets of W; left-over GPUs stay idle; fewer GPUs than W: one set
// of all of them (the ranks share them); none: no set.
TEST(Slots, GpusAreCutIntoConsecutiveSetsOfTheWorldSize) {
  using Sets = std::vector<std::vector<int>>;
  EXPECT_EQ(CutGpuSets({0, 1, 2, 3, 4, 5, 6, 7}, 4), (Sets{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(CutGpuSets({0, 1, 2, 3, 4}, 2), (Sets{{0, 1}, {2, 3}}));
  EXPECT_EQ(CutGpuSets({3, 5}, 2), (Sets{{3, 5}}));  // indices as given, not renumbered
  EXPECT_EQ(CutGpuSets({0}, 8), (Sets{{0}}));
  EXPECT_EQ(CutGpuSets({0, 1, 2}, 8), (Sets{{0, 1, 2}}));
  EXPECT_EQ(CutGpuSets({0, 1}, 0), (Sets{{0}, {1}}));  // W 0 counts as 1
  EXPECT_TRUE(CutGpuSets({}, 2).empty());
}

// 3 CPUs per rank of each GPU set and 2 more for the evaluations, the rest for
// compiles; no split where fewer than 2 would be left, or with no GPU set.
TEST(Slots, GivesEachGpuSetItsRanksCoresAndTheRestToCompiles) {
  std::vector<int> sixteen(16);
  for (int c = 0; c < 16; ++c) sixteen[static_cast<size_t>(c)] = c;
  CpuSplit s = SplitCpus(2, 1, sixteen);
  EXPECT_EQ(s.gpu, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(s.compile, (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(s.compile_slots, 8);
  EXPECT_EQ(SplitCpus(2, 1, {0, 1}).compile_slots, 1);  // never none
  EXPECT_EQ(SplitCpus(2, 0, sixteen).compile_slots, 16);
  EXPECT_EQ(SplitCpus(2, 2, sixteen).gpu.size(), 14u);  // two sets: 14, and 2 are left
  EXPECT_EQ(SplitCpus(2, 2, sixteen).compile, (std::vector<int>{14, 15}));
  EXPECT_TRUE(SplitCpus(8, 1, sixteen).gpu.empty());  // W=8 would need 26

  EXPECT_TRUE(SplitCpus(2, 1, {0, 1}).gpu.empty());   // CI's 2 cores: no split
  EXPECT_TRUE(SplitCpus(2, 0, sixteen).gpu.empty());  // compile-only
  // A cgroup's CPUs, not the machine's numbering.
  CpuSplit odd = SplitCpus(1, 1, {3, 5, 7, 9, 11, 13, 15});
  EXPECT_EQ(odd.gpu, (std::vector<int>{3, 5, 7, 9, 11}));
  EXPECT_EQ(odd.compile, (std::vector<int>{13, 15}));
}

}  // namespace
}  // namespace kforge::eval
