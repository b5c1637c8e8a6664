// The norm, quantization and loss oracles (tasks 009, 017, 018, 019, 020, 044,
// 045, 052, 053, 073) on tiny
// hand-computed inputs, called through the registry so that each task's
// KF_ORACLE registration is tested too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kforge/oracle.h"

namespace kforge {
namespace {

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<double> data;  // for outputs: ignored, filled with a sentinel
};

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// inputs[r] and outputs[r] are rank r's tensors, in task.toml order.
OracleIo MakeIo(const std::vector<std::vector<Tensor>>& inputs,
                const std::vector<std::vector<Tensor>>& outputs) {
  OracleIo io;
  io.world = static_cast<int>(inputs.size());
  for (size_t r = 0; r < inputs.size(); ++r) {
    std::vector<OracleTensor> in, out;
    for (const Tensor& t : inputs[r]) in.push_back({t.name, t.shape, t.data});
    for (const Tensor& t : outputs[r])
      out.push_back({t.name, t.shape, std::vector<double>(Numel(t.shape), -999.0)});
    io.inputs.push_back(in);
    io.outputs.push_back(out);
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
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "at " << i;
}

TEST(NormQuantOracles, LayerNormBackwardSumsColumnsOverRanks) {
  OracleIo io = MakeIo(
      {{{"x_hat", {2, 2}, {1, 2, 3, 4}}, {"dy", {2, 2}, {1, 1, 2, -1}}},
       {{"x_hat", {2, 2}, {0, 1, 1, 0}}, {"dy", {2, 2}, {5, 6, 7, 8}}}},
      {{{"dgamma", {2}, {}}, {"dbeta", {2}, {}}}, {{"dgamma", {2}, {}}, {"dbeta", {2}, {}}}});
  RunOracle("layernorm_backward", io);
  for (int r = 0; r < 2; ++r) {
    ExpectNear(io.out(r, "dgamma"), {14, 4});
    ExpectNear(io.out(r, "dbeta"), {15, 14});
  }
}

TEST(NormQuantOracles, TpRmsNormUsesTheGlobalSumOfSquares) {
  // Global row [3, 4], weight [2, 0.5]: mean square 12.5.
  OracleIo io =
      MakeIo({{{"h", {1, 1}, {3}}, {"w", {1}, {2}}}, {{"h", {1, 1}, {4}}, {"w", {1}, {0.5}}}},
             {{{"y", {1, 1}, {}}}, {{"y", {1, 1}, {}}}});
  io.params["eps"] = 0;
  RunOracle("tp_rms_norm", io);
  ExpectNear(io.out(0, "y"), {6 / std::sqrt(12.5)});
  ExpectNear(io.out(1, "y"), {2 / std::sqrt(12.5)});
}

TEST(NormQuantOracles, ReduceScatterRmsNormNormalisesEachRanksBlockOfTheMean) {
  OracleIo io = MakeIo({{{"x", {2, 2}, {1, 2, 3, 4}}, {"gamma", {2}, {1, 2}}},
                        {{"x", {2, 2}, {3, 2, 5, 0}}, {"gamma", {2}, {1, 2}}}},
                       {{{"y", {1, 2}, {}}}, {{"y", {1, 2}, {}}}});
  io.params["eps"] = 0;
  RunOracle("reducescatter_fused_rmsnorm", io);
  // Rank 0: mean [2, 2], rms 2. Rank 1: mean [4, 2], rms sqrt(10).
  ExpectNear(io.out(0, "y"), {1, 2});
  ExpectNear(io.out(1, "y"), {4 / std::sqrt(10.0), 4 / std::sqrt(10.0)});
}

TEST(NormQuantOracles, Fp8AllGatherRoundTripsWithEachRanksHistoryScale) {
  std::vector<double> hist0(16, 0.0), hist1(16, 0.0);
  hist0[5] = 3.5;  // becomes hist_out[4] and sets rank 0's scale: 3.5 / 448 = 2^-7
  OracleIo io = MakeIo({{{"p", {2}, {1, -2.2}}, {"hist", {16}, hist0}},
                        {{"p", {2}, {0.5, 0}}, {"hist", {16}, hist1}}},
                       {{{"full", {2, 2}, {}}, {"hist_out", {16}, {}}},
                        {{"full", {2, 2}, {}}, {"hist_out", {16}, {}}}});
  RunOracle("fp8_allgather_params", io);
  // Rank 0: 1 / 2^-7 = 128 is exact; -2.2 / 2^-7 = -281.6 rounds to the e4m3 value -288
  // (step 32 in [256, 512)), i.e. -2.25. Rank 1: its amax 0.5 is the scale's, 0.5 -> 448 -> 0.5.
  for (int r = 0; r < 2; ++r) ExpectNear(io.out(r, "full"), {1, -2.25, 0.5, 0});
  std::vector<double> want0(16, 0.0), want1(16, 0.0);
  want0[4] = 3.5;
  want0[15] = 2.203125;  // bf16(2.2)
  want1[15] = 0.5;
  ExpectNear(io.out(0, "hist_out"), want0);
  ExpectNear(io.out(1, "hist_out"), want1);
}

TEST(NormQuantOracles, BlockedFp8QuantizeGathersEveryRanksBlocks) {
  std::vector<double> x0(128, 0.0), x1(128, 0.0);
  x0[0] = 2, x0[1] = -1, x0[2] = 0.3;  // amax 2: scale 2/448
  OracleIo io = MakeIo({{{"x", {1, 128}, x0}}, {{"x", {1, 128}, x1}}},
                       {{{"y", {2, 128}, {}}, {"scales", {2, 1}, {}}},
                        {{"y", {2, 128}, {}}, {"scales", {2, 1}, {}}}});
  io.params["block"] = 128;
  RunOracle("blocked_fp8_quantize", io);
  // 2 -> 448, -1 -> -224, 0.3 -> 67.2, which rounds to the e4m3 value 64 (step 8 in [64, 128));
  // rank 1's all-zero block has scale 0 and values 0.
  std::vector<double> want(256, 0.0);
  want[0] = 448, want[1] = -224, want[2] = 64;
  for (int r = 0; r < 2; ++r) {
    ExpectNear(io.out(r, "y"), want);
    ExpectNear(io.out(r, "scales"), {static_cast<double>(2.0f / 448.0f), 0});
  }
}

TEST(NormQuantOracles, BlockedFp8DequantizeSendsChunkPToRankP) {
  std::vector<double> y0(256, 0.0), y1(256, 0.0);
  y0[0] = 1, y0[1] = 2, y0[128] = 3;  // rank 0: chunk 0 [1, 2, ...], chunk 1 [3, ...]
  y1[0] = 4, y1[128] = 5, y1[129] = 6;
  OracleIo io = MakeIo({{{"y", {2, 1, 128}, y0}, {"s", {2, 1}, {0.5, 0.25}}},
                        {{"y", {2, 1, 128}, y1}, {"s", {2, 1}, {2, 4}}}},
                       {{{"out", {2, 1, 128}, {}}}, {{"out", {2, 1, 128}, {}}}});
  io.params["block"] = 128;
  RunOracle("blocked_fp8_dequantize", io);
  std::vector<double> want0(256, 0.0), want1(256, 0.0);
  want0[0] = 0.5, want0[1] = 1, want0[128] = 8;       // chunks 0 of ranks 0 and 1
  want1[0] = 0.75, want1[128] = 20, want1[129] = 24;  // chunks 1 of ranks 0 and 1
  ExpectNear(io.out(0, "out"), want0);
  ExpectNear(io.out(1, "out"), want1);
}

TEST(NormQuantOracles, QuantizedGradAllReduceRoundsHalfToEven) {
  // Blocks of 2. Rank 0, block 0: amax 127/64, scale 1/64: 0.9765625 / (1/64) = 62.5 -> 62.
  // Rank 1, block 0: amax 127/128, scale 1/128. The last blocks cancel exactly.
  OracleIo io = MakeIo({{{"g", {3}, {1.984375, 0.9765625, -3}}}, {{"g", {3}, {0, 0.9921875, 3}}}},
                       {{{"out", {3}, {}}}, {{"out", {3}, {}}}});
  io.params["block"] = 2;
  RunOracle("quantized_grad_allreduce", io);
  for (int r = 0; r < 2; ++r)
    ExpectNear(io.out(r, "out"), {0.9921875, (0.96875 + 0.9921875) / 2, 0});
}

TEST(NormQuantOracles, Fp8ReduceScatterAveragesRowRAcrossRanks) {
  std::vector<double> hist0(16, 0.0), hist1(16, 0.0);
  hist0[5] = 3.5;  // rank 0's scale 2^-7, as in the all-gather case
  OracleIo io = MakeIo(
      {{{"g", {2, 1}, {1, -2.2}}, {"hist", {16}, hist0}},
       {{"g", {2, 1}, {0.5, 0}}, {"hist", {16}, hist1}}},
      {{{"shard", {1}, {}}, {"hist_out", {16}, {}}}, {{"shard", {1}, {}}, {"hist_out", {16}, {}}}});
  RunOracle("fp8_reduce_scatter_grads", io);
  ExpectNear(io.out(0, "shard"), {(1 + 0.5) / 2});
  ExpectNear(io.out(1, "shard"), {-2.25 / 2});
  std::vector<double> want0(16, 0.0), want1(16, 0.0);
  want0[4] = 3.5;
  want0[15] = 2.203125;
  want1[15] = 0.5;
  ExpectNear(io.out(0, "hist_out"), want0);
  ExpectNear(io.out(1, "hist_out"), want1);
}

TEST(NormQuantOracles, RopeAllGatherRotatesHalvesAndStacksTheSequence) {
  // D = 2: rot([a, b]) = [-b, a]; out = x * cos + rot(x) * sin.
  std::vector<Tensor> r0 = {{"q", {1, 1, 1, 2}, {1, 2}},
                            {"k", {1, 1, 1, 2}, {1, 2}},
                            {"cos", {1, 1, 2}, {0.5, 0.25}},
                            {"sin", {1, 1, 2}, {2, 3}}};
  std::vector<Tensor> r1 = {{"q", {1, 1, 1, 2}, {0, 1}},
                            {"k", {1, 1, 1, 2}, {3, 0}},
                            {"cos", {1, 1, 2}, {1, 1}},
                            {"sin", {1, 1, 2}, {1, 1}}};
  std::vector<Tensor> outs = {{"q_out", {1, 2, 1, 2}, {}}, {"k_out", {1, 2, 1, 2}, {}}};
  OracleIo io = MakeIo({r0, r1}, {outs, outs});
  RunOracle("rope_allgather", io);
  for (int r = 0; r < 2; ++r) {
    ExpectNear(io.out(r, "q_out"), {1 * 0.5 - 2 * 2, 2 * 0.25 + 1 * 3, 0 - 1, 1 + 0});
    ExpectNear(io.out(r, "k_out"), {1 * 0.5 - 2 * 2, 2 * 0.25 + 1 * 3, 3 - 0, 0 + 3});
  }
}

TEST(NormQuantOracles, VocabParallelCrossEntropyUsesTheGlobalVocabulary) {
  // Global logits [1, 2], target 0: max 2, loss = log(e^-1 + 1) + 1.
  OracleIo io = MakeIo({{{"logits", {1, 1, 1}, {1}}, {"target", {1, 1}, {0}}},
                        {{"logits", {1, 1, 1}, {2}}, {"target", {1, 1}, {0}}}},
                       {{{"loss", {1, 1}, {}}, {"logits", {1, 1, 1}, {}}},
                        {{"loss", {1, 1}, {}}, {"logits", {1, 1, 1}, {}}}});
  RunOracle("vocab_parallel_cross_entropy", io);
  for (int r = 0; r < 2; ++r) ExpectNear(io.out(r, "loss"), {std::log(1 + std::exp(-1.0)) + 1});
  ExpectNear(io.out(0, "logits"), {-1});
  ExpectNear(io.out(1, "logits"), {0});
}

}  // namespace
}  // namespace kforge
