// Task 039's oracle (ulysses_attention_e2e): attention over the sequence, not over the heads of
// each token (PKB's defect), so the answer does not depend on how many ranks share the sequence.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kforge/oracle.h"

namespace kforge {
namespace {

// h_r [B, T, H * D] for each rank, the replicated weights, out [B, T, H * D] per rank.
OracleIo MakeIo(int world, int64_t b, int64_t t, int64_t heads, int64_t d,
                const std::vector<std::vector<double>>& h, const std::vector<double>& wqkv,
                const std::vector<double>& wo) {
  const int64_t hidden = heads * d;
  OracleIo io;
  io.world = world;
  io.params = {{"B", b}, {"T", t}, {"H", heads}, {"D", d}};
  io.inputs.resize(world);
  io.outputs.resize(world);
  for (int r = 0; r < world; ++r) {
    io.inputs[r].push_back({"h", {b, t, hidden}, h[r]});
    io.inputs[r].push_back({"wqkv", {3 * hidden, hidden}, wqkv});
    io.inputs[r].push_back({"wo", {hidden, hidden}, wo});
    io.outputs[r].push_back(
        {"out", {b, t, hidden}, std::vector<double>(static_cast<size_t>(b * t * hidden), -999.0)});
  }
  return io;
}

void RunOracle(OracleIo& io) {
  const OracleFn* fn = FindOracle("ulysses_attention_e2e");
  ASSERT_NE(fn, nullptr) << "ulysses_attention_e2e is not registered";
  Status s = (*fn)(io);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

// W = 2, one token per rank, two heads of D = 1, q = k = v = h and wo = I (scale 1):
//   head 0: h = (1, 0) over the tokens: token 0 scores (1, 0) -> o = e / (e + 1); token 1 scores
//           (0, 0) -> o = 1/2;
//   head 1: h = (0, 2): token 0 scores (0, 0) -> o = 1; token 1 scores (0, 4) -> 2 e^4 / (1 + e^4).
// A softmax over the two heads of each token instead (PKB) would give token 0 (e/(e+1), 0).
TEST(UlyssesAttentionOracle, EachHeadAttendsOverTheWholeSequence) {
  const std::vector<double> eye3 = {1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1};
  OracleIo io = MakeIo(2, 1, 1, 2, 1, {{1, 0}, {0, 2}}, eye3, {1, 0, 0, 1});
  RunOracle(io);
  const double e = std::exp(1.0), e4 = std::exp(4.0);
  auto out0 = io.out(0, "out");
  auto out1 = io.out(1, "out");
  EXPECT_NEAR(out0[0], e / (e + 1), 1e-12);
  EXPECT_NEAR(out0[1], 1.0, 1e-12);
  EXPECT_NEAR(out1[0], 0.5, 1e-12);
  EXPECT_NEAR(out1[1], 2 * e4 / (1 + e4), 1e-12);
}

// The same global sequence split over 2 and over 4 ranks gives the same outputs, token by token.
TEST(UlyssesAttentionOracle, OutputDoesNotDependOnTheWorldSize) {
  const int64_t b = 2, s = 8, heads = 4, d = 3, hidden = heads * d;
  std::mt19937_64 rng(39);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> h(static_cast<size_t>(b * s * hidden)), wqkv(3 * hidden * hidden),
      wo(hidden * hidden);
  for (double& x : h) x = normal(rng);
  for (double& x : wqkv) x = normal(rng) / std::sqrt(static_cast<double>(hidden));
  for (double& x : wo) x = normal(rng) / std::sqrt(static_cast<double>(hidden));
  std::vector<std::vector<double>> global;  // [B, S, hidden] for each W
  for (int world : {2, 4}) {
    const int64_t t = s / world;
    std::vector<std::vector<double>> shards(world);
    for (int r = 0; r < world; ++r)
      for (int64_t bi = 0; bi < b; ++bi)
        for (int64_t i = 0; i < t * hidden; ++i)
          shards[r].push_back(h[static_cast<size_t>((bi * s + r * t) * hidden + i)]);
    OracleIo io = MakeIo(world, b, t, heads, d, shards, wqkv, wo);
    RunOracle(io);
    std::vector<double> y(h.size());
    for (int r = 0; r < world; ++r) {
      auto out = io.out(r, "out");
      for (int64_t bi = 0; bi < b; ++bi)
        for (int64_t i = 0; i < t * hidden; ++i)
          y[static_cast<size_t>((bi * s + r * t) * hidden + i)] = out[bi * t * hidden + i];
    }
    global.push_back(y);
  }
  for (size_t i = 0; i < global[0].size(); ++i)
    EXPECT_NEAR(global[0][i], global[1][i], 1e-12) << "element " << i;
}

}  // namespace
}  // namespace kforge
