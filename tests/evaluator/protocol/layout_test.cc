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

}  // namespace
}  // namespace kforge::eval
