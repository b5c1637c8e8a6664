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

}  // namespace
}  // namespace kforge
