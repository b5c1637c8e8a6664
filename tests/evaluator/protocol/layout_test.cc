// The arena layout both worker roles share.
#include "protocol/layout.h"

#include <gtest/gtest.h>

namespace kforge::eval {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

Problem WithTensorAndWorkspace(size_t tensor_bytes, size_t workspace_bytes) {
  Problem p;
  ConcreteTensor x;
  x.name = "x";
  x.nbytes = tensor_bytes;
  p.inputs.push_back(x);
  ConcreteTensor y = x;
  y.name = "y";
  p.outputs.push_back(y);
  p.workspace_bytes = workspace_bytes;
  return p;
}

TEST(LayoutTest, EmulatedStagingHoldsACollectiveOnTheWorkspace) {
  // 086's reference all-reduces a 64 MiB f32 Gram matrix it built in its
  // workspace while its tensors are 16 MiB: the staging must take it.
  proto::ArenaLayout l = proto::ComputeLayout(WithTensorAndWorkspace(16 * kMiB, 64 * kMiB), 4,
                                              /*staging=*/true, /*pristine=*/false);
  EXPECT_GE(l.staging_bytes, 64 * kMiB);
  EXPECT_GE(l.staging_bytes, l.workspace_bytes);
  // And a tensor larger than the workspace still fits.
  l = proto::ComputeLayout(WithTensorAndWorkspace(96 * kMiB, kMiB), 1, true, false);
  EXPECT_GE(l.staging_bytes, 96 * kMiB);
}

TEST(LayoutTest, RegionsDoNotOverlapAndNoStagingWithoutEmulation) {
  proto::ArenaLayout l =
      proto::ComputeLayout(WithTensorAndWorkspace(3 * kMiB, 5 * kMiB), 2, false, false);
  EXPECT_EQ(l.staging_bytes, 0u);
  ASSERT_EQ(l.sets, 2);
  EXPECT_GE(l.output_off[0][0], l.input_off[0][0] + 3 * kMiB);
  EXPECT_GE(l.input_off[1][0], l.output_off[0][0] + 3 * kMiB);
  EXPECT_GE(l.workspace_off, l.output_off[1][0] + 3 * kMiB);
  EXPECT_GE(l.pad_off, l.workspace_off + 5 * kMiB);
  EXPECT_GE(l.total, l.pad_off + l.pad_bytes);
}

// A split candidate arena: every set's inputs that are not also outputs lie
// in the read-only part, and nothing the kernel writes does; without a split
// the layout is the one every worker has always computed.
TEST(LayoutTest, ASplitArenaHoldsEveryReadOnlyInputInItsPartAndNothingWritable) {
  Problem p = WithTensorAndWorkspace(3 * kMiB + 100, kMiB);
  ConcreteTensor acc;
  acc.name = "acc";
  acc.nbytes = kMiB;
  acc.inout = true;
  p.inputs.push_back(acc);
  ConcreteTensor acc_out = acc;
  acc_out.inout_of = 1;
  p.outputs.push_back(acc_out);
  const int sets = 3;
  const size_t need = proto::ReadOnlyInputBytes(p, sets);
  EXPECT_GE(need, 3 * (3 * kMiB + 100));
  EXPECT_LT(need, 3 * (3 * kMiB + 100) + 3 * proto::kArenaAlign);
  const size_t part = 10 * kMiB;  // rounded up to a granularity, as the harness does
  proto::ArenaLayout l = proto::ComputeLayout(p, sets, /*staging=*/true, /*pristine=*/false, part);
  EXPECT_EQ(l.readonly_bytes, part);
  EXPECT_LE(l.readonly_used, part);
  for (int s = 0; s < sets; ++s) {
    EXPECT_LE(l.input_off[s][0] + p.inputs[0].nbytes, part) << "set " << s;
    EXPECT_GE(l.input_off[s][1], part) << "the in-place input of set " << s;
    EXPECT_EQ(l.output_off[s][1], l.input_off[s][1]);
    EXPECT_GE(l.output_off[s][0], part);
    for (int t = 0; t < s; ++t) EXPECT_NE(l.input_off[s][0], l.input_off[t][0]);
  }
  EXPECT_GE(l.workspace_off, part);
  EXPECT_GE(l.pad_off, part);
  EXPECT_GE(l.staging_off, part);
  EXPECT_GE(l.total, l.staging_off + l.staging_bytes);

  const proto::ArenaLayout plain = proto::ComputeLayout(p, sets, true, false);
  const proto::ArenaLayout zero = proto::ComputeLayout(p, sets, true, false, 0);
  EXPECT_EQ(plain.input_off, zero.input_off);
  EXPECT_EQ(plain.output_off, zero.output_off);
  EXPECT_EQ(plain.total, zero.total);
  EXPECT_EQ(plain.input_off[0][0], 0u);
  EXPECT_EQ(plain.input_off[0][1], plain.input_off[0][0] + 3 * kMiB + 256);
}

}  // namespace
}  // namespace kforge::eval
