// Task 072's oracle (Hyena's gated long convolution over zigzag shards) on
// tiny hand-computed inputs, called through the registry so that the task's
// KF_ORACLE registration is tested too.
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

OracleIo MakeIo(int world, const std::vector<Tensor>& inputs, const std::vector<int64_t>& y_shape) {
  OracleIo io;
  io.world = world;
  io.inputs.resize(world);
  io.outputs.resize(world);
  int64_t n = 1;
  for (int64_t d : y_shape) n *= d;
  for (int r = 0; r < world; ++r) {
    for (const Tensor& t : inputs) io.inputs[r].push_back({t.name, t.shape, t.per_rank[r]});
    io.outputs[r].push_back({"y", y_shape, std::vector<double>(n, -999.0)});
  }
  return io;
}

void RunOracle(OracleIo& io) {
  const OracleFn* fn = FindOracle("hyena_forward_cp");
  ASSERT_NE(fn, nullptr) << "hyena_forward_cp is not registered";
  Status s = (*fn)(io);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

void ExpectNear(std::span<const double> got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "element " << i;
}

TEST(HyenaForwardOracle, GatesTheCausalConvolutionInZigzagOrderAndTransposes) {
  // W = 2, C = 1: rank 0 holds chunks (0, 3), rank 1 chunks (1, 2); B = 1,
  // D = 2 channels with a filter row each (Lh = 2).
  // Channel 0: U = X2 V = [1, 2, 3, 4], h = [10, 1], bias 0.5, X1 = [1, 2, 1, -1]:
  //   10 U[t] + U[t-1] + 0.5 U[t] = [10.5, 22, 33.5, 45], Y = [10.5, 44, 33.5, -45].
  // Channel 1: U = [2, 0, 1, 3], h = [1, 100], bias 0, X1 = 1: Y = [2, 200, 1, 103].
  const std::vector<int64_t> xs = {1, 2, 2};
  const std::vector<double> h = {10, 1, 1, 100}, bias = {0.5, 0};
  OracleIo io = MakeIo(2,
                       {{"x1", xs, {{1, -1, 1, 1}, {2, 1, 1, 1}}},
                        {"x2", xs, {{1, 4, 1, 1}, {2, 3, 1, 1}}},
                        {"v", xs, {{1, 1, 2, 3}, {1, 1, 0, 1}}},
                        {"h", {2, 2}, {h, h}},
                        {"bias", {2}, {bias, bias}}},
                       {1, 2, 2});
  RunOracle(io);
  // y[b][j][c]: rank 0's positions are t = 0 and t = 3, rank 1's t = 1 and t = 2.
  ExpectNear(io.out(0, "y"), {10.5, 2, -45, 103});
  ExpectNear(io.out(1, "y"), {44, 200, 33.5, 1});
}

TEST(HyenaForwardOracle, GroupsShareAFilterRowAndTapsPastTheSequenceNeverCount) {
  // W = 2, C = 1 (L = 4), D = 2 channels in one group (GD = 2), Lh = 6 > L:
  // h = [1, 1, 1, 1, 1000, 1000] gives prefix sums; taps 4 and 5 reach no
  // output. Channel 0: U = [1, 2, 3, 4] -> [1, 3, 6, 10]; channel 1: U = [1, 0,
  // 0, 0] -> [1, 1, 1, 1]. X1 = 1, bias 0.
  const std::vector<int64_t> xs = {1, 2, 2};
  const std::vector<double> h = {1, 1, 1, 1, 1000, 1000}, bias = {0, 0};
  OracleIo io = MakeIo(2,
                       {{"x1", xs, {{1, 1, 1, 1}, {1, 1, 1, 1}}},
                        {"x2", xs, {{1, 4, 1, 0}, {2, 3, 0, 0}}},
                        {"v", xs, {{1, 1, 1, 1}, {1, 1, 1, 1}}},
                        {"h", {1, 6}, {h, h}},
                        {"bias", {2}, {bias, bias}}},
                       {1, 2, 2});
  RunOracle(io);
  ExpectNear(io.out(0, "y"), {1, 1, 10, 1});
  ExpectNear(io.out(1, "y"), {3, 1, 6, 1});
}

}  // namespace
}  // namespace kforge
