// The oracles of tasks 112 (vocabulary-parallel sampling), 114 (RL weight refit) and 115
// (FSDP2 float8 all-gather) on tiny hand-computed cases: the tie order and the top-p /
// inverse-CDF rule, the trainer-to-engine layout, and the dynamic scale with padding rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kforge/oracle.h"
#include "oracle_io.h"

namespace kforge::oracle_test {
namespace {

// Two ranks of three logits: global ids 0-2 on rank 0, 3-5 on rank 1.
TEST(ServingOracles, SamplingBreaksTiesByTokenIdAndAppliesTopPThenTheUniform) {
  const std::vector<double> row_tie = {1, 3, 2, 3, 0, -1};  // ids 1 and 3 tie at the top
  const std::vector<double> row_flat = {0, 0, 0, 0, 0, 0};
  const std::vector<double> row_p = {2, 0, 1, -5, 0.5, 1};  // ids 2 and 5 tie at 1
  const std::vector<std::vector<double>> rows = {row_tie, row_tie, row_flat, row_p};
  std::vector<std::vector<double>> logits(2);
  for (const auto& row : rows) {
    for (int r = 0; r < 2; ++r)
      logits[r].insert(logits[r].end(), row.begin() + 3 * r, row.begin() + 3 * r + 3);
  }
  // Row 0: greedy. Row 1: top_k 1. Row 2: all equal, order 0,1,2,3; P = 1,2,3,4; u * P_4 = 2.4
  // picks the third, id 2. Row 3: order 0, 2, 5 (k = 3); p = 1, e^-1, e^-1; top_p 0.7 keeps
  // the first two (P_1 = 1 < 0.7 * 1.7358 <= P_2); u = 0.8: 0.8 * 1.3679 = 1.094 > P_1, so id 2.
  const std::vector<double> temperature = {0, 1, 1, 1}, top_k = {5, 1, 4, 3},
                            top_p = {1, 1, 1, 0.7}, u = {0.9, 0.9, 0.6, 0.8};
  OracleIo io = MakeIo(2,
                       {{"logits", {4, 3}, logits},
                        {"temperature", {4}, {temperature, temperature}},
                        {"top_k", {4}, {top_k, top_k}},
                        {"top_p", {4}, {top_p, top_p}},
                        {"u", {4}, {u, u}}},
                       {{"token", {4}}}, {});
  RunOracle("vocab_parallel_sampling", io);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(Out(io, r, "token"), (std::vector<double>{1, 1, 2, 2}));
  // A tighter top_p keeps only the largest logit, whatever u.
  io.inputs[0][3].data[3] = io.inputs[1][3].data[3] = 0.5;
  RunOracle("vocab_parallel_sampling", io);
  EXPECT_EQ(Out(io, 0, "token")[3], 0);
}

// L = 2 layers of H = 2, KV = 1, I = 3: 2 * (3H + 2H^2 + 2 KV H + 2 KV + 3 I H) = 2 * 38.
TEST(ServingOracles, RefitTableRunsFromMegatronsReversedOrderToVllmsStackedLayout) {
  const GeneratorFn* gen = FindGenerator("rl_weight_refit_broadcast");
  ASSERT_NE(gen, nullptr);
  OracleTensor table{"tensors", {24, 3}, std::vector<double>(72, 0.0)};
  OracleRng rng(1);
  GeneratorIo g;
  g.world = 2;
  g.input = 1;
  g.input_name = "tensors";
  g.params = {{"L", 2}, {"H", 2}, {"KV", 1}, {"I", 3}, {"P", 76}};
  g.tensor = &table;
  g.rng = &rng;
  ASSERT_TRUE((*gen)(g).ok());
  const auto row = [&](int t) {
    return std::vector<double>(table.data.begin() + 3 * t, table.data.begin() + 3 * t + 3);
  };
  // First in the trainer's buffer: layer 1's post-attention norm, the engine's last tensor.
  EXPECT_EQ(row(0), (std::vector<double>{0, 74, 2}));
  // Then layer 1's input norm, just before it in the engine.
  EXPECT_EQ(row(1), (std::vector<double>{2, 72, 2}));
  // Last: layer 0's q_proj weight, the engine's first; k_proj's weight follows it there (qkv_proj)
  // while the biases sit after the three stacked weights.
  EXPECT_EQ(row(23), (std::vector<double>{72, 0, 4}));
  EXPECT_EQ(row(21), (std::vector<double>{68, 4, 2}));
  EXPECT_EQ(row(22), (std::vector<double>{70, 8, 2}));  // q_proj bias after q, k, v weights
  // The oracle moves the root's values along the table, to every rank.
  std::vector<double> params(76);
  for (int i = 0; i < 76; ++i) params[static_cast<size_t>(i)] = 100 + i;
  OracleIo io = MakeIo(2,
                       {{"params", {76}, {params, std::vector<double>(76, -1)}},
                        {"tensors", {24, 3}, {table.data, table.data}}},
                       {{"weights", {76}}}, {{"root", 0}});
  RunOracle("rl_weight_refit_broadcast", io);
  for (int r = 0; r < 2; ++r) {
    const std::vector<double> w = Out(io, r, "weights");
    EXPECT_EQ(w[0], 172);   // layer 0 q weight, params[72]
    EXPECT_EQ(w[75], 101);  // layer 1 post norm, params[1]
  }
}

// One weight of 3 rows x 2 columns over 2 ranks: rank 0 holds rows 0-1, rank 1 row 2 and a
// padding row whose values must not reach the amax.
TEST(ServingOracles, Fp8AllGatherScalesByTheWholeWeightsAmaxAndIgnoresPadding) {
  const std::vector<double> rank0 = {0.5, -1.0, 0.3, 2.0}, rank1 = {-4.0, 1.0, 1000, -1000};
  const std::vector<double> table = {3, 2, 0, 0};
  OracleIo io = MakeIo(2, {{"shards", {4}, {rank0, rank1}}, {"tensors", {1, 4}, {table, table}}},
                       {{"weights_fp8", {6}}, {"scales", {1}}}, {});
  RunOracle("fsdp2_fp8_allgather", io);
  // amax 4, scale 448 / 4 = 112; 0.3 * 112 = 33.6 rounds to 32 in e4m3 (step 4 above 32).
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(Out(io, r, "scales"), (std::vector<double>{112}));
    EXPECT_EQ(Out(io, r, "weights_fp8"), (std::vector<double>{56, -112, 32, 224, -448, 112}));
  }
}

}  // namespace
}  // namespace kforge::oracle_test
