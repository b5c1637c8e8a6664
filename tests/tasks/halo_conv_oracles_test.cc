// The halo-exchange convolution oracles (tasks 071, 087) on tiny hand-computed
// inputs, called through the registry so that each task's KF_ORACLE
// registration is tested too.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kforge/oracle.h"

namespace kforge {
namespace {

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<std::vector<double>> per_rank;  // one value list per rank
};

OracleIo MakeIo(int world, const std::vector<Tensor>& inputs, const std::string& out,
                const std::vector<int64_t>& out_shape) {
  OracleIo io;
  io.world = world;
  io.inputs.resize(world);
  io.outputs.resize(world);
  int64_t n = 1;
  for (int64_t d : out_shape) n *= d;
  for (int r = 0; r < world; ++r) {
    for (const Tensor& t : inputs) io.inputs[r].push_back({t.name, t.shape, t.per_rank[r]});
    io.outputs[r].push_back({out, out_shape, std::vector<double>(n, -999.0)});
  }
  return io;
}

void RunOracle(const char* name, OracleIo& io) {
  const OracleFn* fn = FindOracle(name);
  ASSERT_NE(fn, nullptr) << name << " is not registered";
  Status s = (*fn)(io);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

void ExpectNear(std::span<const double> got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "element " << i;
}

TEST(HaloConvOracles, HyenaConvFollowsTheZigzagChunkOrder) {
  // W = 3, C = 1: ranks hold chunks (0, 5), (1, 4), (2, 3). Channel 0's global
  // sequence is X = [1, 3, 5, 6, 4, 2] and its filter [10, 1]: Y[t] = 10 X[t-1]
  // + X[t] (X[-1] = 0) = [1, 13, 35, 56, 64, 42]. Channel 1's filter [0, 1] is
  // the identity.
  const std::vector<int64_t> xs = {1, 2, 2};
  const std::vector<double> w = {10, 1, 0, 1};
  OracleIo io = MakeIo(
      3, {{"x", xs, {{1, 2, 7, 8}, {3, 4, 9, 10}, {5, 6, 11, 12}}}, {"w", {2, 2}, {w, w, w}}}, "y",
      xs);
  RunOracle("hyena_conv1d_boundary_exchange", io);
  ExpectNear(io.out(0, "y"), {1, 42, 7, 8});
  ExpectNear(io.out(1, "y"), {13, 64, 9, 10});
  ExpectNear(io.out(2, "y"), {35, 56, 11, 12});
}

TEST(HaloConvOracles, Conv2dTakesTheRowsAboveAndBelowFromTheNeighbours) {
  // W = 3 ranks of one pixel each (C = 1, h = 1, Wd = 1): the image column is
  // [1, 2, 3]. Only the kernel's middle column (v = 1) sees pixels: [10, 100,
  // 1000] from the row above to the row below; the other taps (7) fall on the
  // zero padding.
  const std::vector<int64_t> xs = {1, 1, 1, 1};
  const std::vector<double> w = {7, 10, 7, 7, 100, 7, 7, 1000, 7};
  OracleIo io = MakeIo(3,
                       {{"x", xs, {{1}, {2}, {3}}},
                        {"w", {1, 1, 3, 3}, {w, w, w}},
                        {"b", {1}, {{0.5}, {0.5}, {0.5}}}},
                       "y", xs);
  RunOracle("conv2d_boundary_exchange", io);
  ExpectNear(io.out(0, "y"), {0.5 + 100 * 1 + 1000 * 2});
  ExpectNear(io.out(1, "y"), {0.5 + 10 * 1 + 100 * 2 + 1000 * 3});
  ExpectNear(io.out(2, "y"), {0.5 + 10 * 2 + 100 * 3});
}

TEST(HaloConvOracles, Conv2dWeightIsOutChannelThenInChannel) {
  // C = 2, one pixel per rank: the only nonzero tap is w[0, 1, 1, 1] = 5, so
  // y[0] = b[0] + 5 * x[1] and y[1] = b[1].
  const std::vector<int64_t> xs = {1, 2, 1, 1};
  std::vector<double> w(2 * 2 * 9, 0.0);
  w[(0 * 2 + 1) * 9 + 4] = 5;
  OracleIo io = MakeIo(
      2, {{"x", xs, {{1, 2}, {3, 4}}}, {"w", {2, 2, 3, 3}, {w, w}}, {"b", {2}, {{-1, 9}, {-1, 9}}}},
      "y", xs);
  RunOracle("conv2d_boundary_exchange", io);
  ExpectNear(io.out(0, "y"), {-1 + 5 * 2, 9});
  ExpectNear(io.out(1, "y"), {-1 + 5 * 4, 9});
}

}  // namespace
}  // namespace kforge
