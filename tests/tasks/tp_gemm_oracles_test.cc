// The tensor-parallel GEMM oracles (tasks 011-016, 046, 048) on tiny hand-computed inputs, called
// through the registry so that each task's KF_ORACLE registration is tested too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kforge/oracle.h"
#include "oracle_io.h"

namespace kforge {
namespace {

using oracle_test::MakeIo;
using oracle_test::Out;
using oracle_test::RunOracle;
using oracle_test::Tensor;

double Silu(double u) { return u / (1.0 + std::exp(-u)); }

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "element " << i;
}

// a_0 = [1; 2], b_0 = [3 4], a_1 = [5; 6], b_1 = [-1 2]:
// a_0 b_0 + a_1 b_1 = [3 4; 6 8] + [-5 10; -6 12] = [-2 14; 0 20].
const std::vector<Tensor> kRowParallel = {
    {"a", {2, 1}, {{1, 2}, {5, 6}}},
    {"b", {1, 2}, {{3, 4}, {-1, 2}}},
};

TEST(TpGemmOracles, GemmAllReduceSumsThePartialsOnEveryRank) {
  OracleIo io = MakeIo(2, kRowParallel, {{"c", {2, 2}}}, {{"M", 2}, {"N", 2}, {"K", 1}});
  RunOracle("gemm_allreduce", io);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(Out(io, r, "c"), (std::vector<double>{-2, 14, 0, 20}));
}

TEST(TpGemmOracles, GemmReduceScatterGivesEachRankItsRows) {
  OracleIo io = MakeIo(2, kRowParallel, {{"c", {1, 2}}}, {{"R", 1}, {"N", 2}, {"K", 1}});
  RunOracle("gemm_reducescatter", io);
  EXPECT_EQ(Out(io, 0, "c"), (std::vector<double>{-2, 14}));
  EXPECT_EQ(Out(io, 1, "c"), (std::vector<double>{0, 20}));
}

TEST(TpGemmOracles, AllGatherGemmConcatenatesShardsAlongK) {
  // X = [2 3]; b_0 = I gives [2 3], b_1 = [1 1; 1 -1] gives [5 -1].
  OracleIo io = MakeIo(2, {{"a", {1, 1}, {{2}, {3}}}, {"b", {2, 2}, {{1, 0, 0, 1}, {1, 1, 1, -1}}}},
                       {{"c", {1, 2}}}, {{"M", 1}, {"N", 2}, {"K", 1}});
  RunOracle("allgather_gemm", io);
  EXPECT_EQ(Out(io, 0, "c"), (std::vector<double>{2, 3}));
  EXPECT_EQ(Out(io, 1, "c"), (std::vector<double>{5, -1}));
}

TEST(TpGemmOracles, AllGatherGemmAtStacksKMajorShards) {
  // X^T = [1 2; 3 4], so X = [1 3; 2 4]; b_0 = I gives X, b_1 = [1 1; 2 0] gives [7 1; 10 2].
  OracleIo io =
      MakeIo(2, {{"a_t", {1, 2}, {{1, 2}, {3, 4}}}, {"b", {2, 2}, {{1, 0, 0, 1}, {1, 1, 2, 0}}}},
             {{"c", {2, 2}}}, {{"M", 2}, {"N", 2}, {"K", 1}});
  RunOracle("allgather_gemm_at", io);
  EXPECT_EQ(Out(io, 0, "c"), (std::vector<double>{1, 3, 2, 4}));
  EXPECT_EQ(Out(io, 1, "c"), (std::vector<double>{7, 1, 10, 2}));
}

TEST(TpGemmOracles, GemmAllGatherConcatenatesBlocksAlongColumns) {
  // a = [1 2] on both ranks; b_0 = [3; 4] gives 11, b_1 = [-1; 1] gives 1.
  OracleIo io = MakeIo(2, {{"a", {1, 2}, {{1, 2}, {1, 2}}}, {"b", {2, 1}, {{3, 4}, {-1, 1}}}},
                       {{"c", {1, 2}}}, {{"M", 1}, {"N", 1}, {"K", 2}});
  RunOracle("gemm_allgather", io);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(Out(io, r, "c"), (std::vector<double>{11, 1}));
}

TEST(TpGemmOracles, GemvDecodeAddsTheBiasAndGathersTheVocabulary) {
  // h = [1 2]; rank 0: [3 4] . h + 0.5 = 11.5; rank 1: [1 -1] . h - 1 = -2.
  OracleIo io = MakeIo(2,
                       {{"h", {1, 2}, {{1, 2}, {1, 2}}},
                        {"w", {1, 2}, {{3, 4}, {1, -1}}},
                        {"bias", {1}, {{0.5}, {-1}}}},
                       {{"logits", {1, 2}}}, {{"B", 1}, {"H", 2}, {"V", 1}});
  RunOracle("gemv_decode", io);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(Out(io, r, "logits"), (std::vector<double>{11.5, -2}));
}

TEST(TpGemmOracles, CombinedShardedGemmsIsASequenceParallelMlp) {
  // X = [1; -2]; rank 0's weights (w1 = 3 would be rank 1's) give 2 * silu(X), rank 1's silu(3X).
  OracleIo io = MakeIo(
      2, {{"x", {1, 1}, {{1}, {-2}}}, {"w1", {1, 1}, {{1}, {3}}}, {"w2", {1, 1}, {{2}, {1}}}},
      {{"y", {1, 1}}}, {{"R", 1}, {"H", 1}, {"F", 1}});
  RunOracle("combined_sharded_gemms", io);
  ExpectNear(Out(io, 0, "y"), {2 * Silu(1) + Silu(3)});
  ExpectNear(Out(io, 1, "y"), {2 * Silu(-2) + Silu(-6)});
}

TEST(TpGemmOracles, FsdpAndTpAtTwoRanksIsFsdpOnly) {
  // W = 2: one TP rank, FSDP over both. W1 = [1; 2], W2 = [1; -1], W3 = [1 3].
  // Rank 0: x = [1 2]: silu(5) * (-1) * [1 3]; rank 1: x = [3 -1]: silu(1) * 4 * [1 3].
  OracleIo io = MakeIo(2,
                       {{"x", {1, 2}, {{1, 2}, {3, -1}}},
                        {"w1", {1, 1}, {{1}, {2}}},
                        {"w2", {1, 1}, {{1}, {-1}}},
                        {"w3", {1, 1}, {{1}, {3}}}},
                       {{"y", {1, 2}}}, {{"B", 1}, {"D", 2}, {"Fl", 1}});
  RunOracle("fsdp_and_tp", io);
  ExpectNear(Out(io, 0, "y"), {-Silu(5), -3 * Silu(5)});
  ExpectNear(Out(io, 1, "y"), {4 * Silu(1), 12 * Silu(1)});
}

TEST(TpGemmOracles, FsdpAndTpAtFourRanksSumsOverTp) {
  // W = 4: rank r = 2f + t. TP rank 0 gathers w1 of ranks 0, 2 (W1_0 = [1; 3]), TP rank 1 of
  // ranks 1, 3 (W1_1 = [2; 4]); W2_t = [1; 1]; W3_t = [1 2] for both.
  // FSDP rank 0 (x = [1 0]): (silu(1) + silu(2)) * [1 2]; FSDP rank 1 (x = [0 1]):
  // (silu(3) + silu(4)) * [1 2].
  OracleIo io = MakeIo(4,
                       {{"x", {1, 2}, {{1, 0}, {1, 0}, {0, 1}, {0, 1}}},
                        {"w1", {1, 1}, {{1}, {2}, {3}, {4}}},
                        {"w2", {1, 1}, {{1}, {1}, {1}, {1}}},
                        {"w3", {1, 1}, {{1}, {1}, {2}, {2}}}},
                       {{"y", {1, 2}}}, {{"B", 1}, {"D", 2}, {"Fl", 1}});
  RunOracle("fsdp_and_tp", io);
  const double g0 = Silu(1) + Silu(2), g1 = Silu(3) + Silu(4);
  for (int r : {0, 1}) ExpectNear(Out(io, r, "y"), {g0, 2 * g0});
  for (int r : {2, 3}) ExpectNear(Out(io, r, "y"), {g1, 2 * g1});
}

}  // namespace
}  // namespace kforge
