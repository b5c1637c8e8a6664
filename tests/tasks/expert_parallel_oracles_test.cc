// The expert-parallel oracles beyond PKB (tasks 106-110) on tiny hand-worked
// inputs, called through the registry: DeepEP's dispatch order and remapping,
// the combine's weighted sum, DeepEP's fp8 arithmetic, the capacity tie-break and
// vLLM's EPLB sender split.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kforge/oracle.h"
#include "oracle_io.h"

namespace kforge {
namespace {

using oracle_test::MakeIo;
using oracle_test::Out;
using oracle_test::RunOracle;
using V = std::vector<double>;

// The first n values of rank's output (the rows a counted output checks).
V Head(OracleIo& io, int rank, const char* name, size_t n) {
  const V all = Out(io, rank, name);
  return V(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
}

// W = 2, E = 4 (L = 2), T = 3, H = 2, k = 2. Rank 0's tokens: t0 -> {1, 2}, t1 -> {0, 1},
// t2 -> {3, 2}; rank 1's: t0 -> {2, 3}, t1 -> {1, 0}, t2 -> {0, 3}.
OracleIo DispatchIo() {
  return MakeIo(2,
                {{"x", {3, 2}, {{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12}}},
                 {"topk_idx", {3, 2}, {{1, 2, 0, 1, 3, 2}, {2, 3, 1, 0, 0, 3}}},
                 {"topk_weights", {3, 2}, {{.1, .2, .3, .4, .5, .6}, {.7, .8, .9, .25, .35, .45}}}},
                {{"recv_x", {6, 2}},
                 {"recv_src_idx", {6}},
                 {"recv_topk_idx", {6, 2}},
                 {"recv_topk_weights", {6, 2}},
                 {"num_recv", {1}},
                 {"num_recv_tokens_per_expert", {2}}},
                {{"T", 3}, {"H", 2}, {"k", 2}, {"E", 4}});
}

TEST(ExpertParallelOracles, DeepepDispatchGroupsBySourceThenTokenAndRemapsToLocalExperts) {
  OracleIo io = DispatchIo();
  RunOracle("deepep_dispatch", io);
  // Rank 0 (experts 0, 1): rank 0's t0, t1, then rank 1's t1, t2.
  EXPECT_EQ(Out(io, 0, "num_recv"), V({4}));
  EXPECT_EQ(Head(io, 0, "recv_x", 8), V({1, 2, 3, 4, 9, 10, 11, 12}));
  EXPECT_EQ(Head(io, 0, "recv_src_idx", 4), V({0, 1, 1, 2}));
  EXPECT_EQ(Head(io, 0, "recv_topk_idx", 8), V({1, -1, 0, 1, 1, 0, 0, -1}));
  EXPECT_EQ(Head(io, 0, "recv_topk_weights", 8), V({.1, 0, .3, .4, .9, .25, .35, 0}));
  EXPECT_EQ(Out(io, 0, "num_recv_tokens_per_expert"), V({3, 3}));
  // Rank 1 (experts 2, 3): rank 0's t0, t2, then rank 1's t0, t2.
  EXPECT_EQ(Out(io, 1, "num_recv"), V({4}));
  EXPECT_EQ(Head(io, 1, "recv_src_idx", 4), V({0, 2, 0, 2}));
  EXPECT_EQ(Head(io, 1, "recv_topk_idx", 8), V({-1, 0, 1, 0, 0, 1, -1, 1}));
  EXPECT_EQ(Out(io, 1, "num_recv_tokens_per_expert"), V({3, 3}));
}

TEST(ExpertParallelOracles, DeepepCombineFindsEachSlotsRowInDispatchOrder) {
  // The routing of DispatchIo, H = 1. Rank 0 holds pairs (r0 t0 s0), (r0 t1 s0), (r0 t1 s1),
  // (r1 t1 s0), (r1 t1 s1), (r1 t2 s0); rank 1 holds (r0 t0 s1), (r0 t2 s0), (r0 t2 s1),
  // (r1 t0 s0), (r1 t0 s1), (r1 t2 s1). Row i of rank d's expert_out holds 10 * d + i.
  OracleIo io = MakeIo(2,
                       {{"topk_idx", {3, 2}, {{1, 2, 0, 1, 3, 2}, {2, 3, 1, 0, 0, 3}}},
                        {"topk_weights", {3, 2}, {{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12}}},
                        {"expert_out", {6, 1}, {{0, 1, 2, 3, 4, 5}, {10, 11, 12, 13, 14, 15}}}},
                       {{"out", {3, 1}}}, {{"T", 3}, {"H", 1}, {"k", 2}, {"E", 4}, {"C", 6}});
  RunOracle("deepep_combine", io);
  EXPECT_EQ(Out(io, 0, "out"), V({1 * 0 + 2 * 10, 3 * 1 + 4 * 2, 5 * 11 + 6 * 12}));
  EXPECT_EQ(Out(io, 1, "out"), V({7 * 13 + 8 * 14, 9 * 3 + 10 * 4, 11 * 5 + 12 * 15}));
}

TEST(ExpertParallelOracles, DeepepLowLatencyQuantizesInFp32AndGroupsByLocalExpert) {
  // W = 2, E = 2 (L = 1), T = 2, one group of 128 channels, k = 1: rank 0's t0 and rank 1's t1
  // go to expert 1 (rank 1), the others to expert 0.
  V x0(256, 0.0), x1(256, 1.0);
  x0[128] = 2.0;   // rank 0, t1: amax 2, the other channels 0
  x0[129] = -1.0;  // t0 of rank 0 stays all zero: amax is the 1e-4 floor
  OracleIo io = MakeIo(2, {{"x", {2, 128}, {x0, x1}}, {"topk_idx", {2, 1}, {{1, 0}, {1, 0}}}},
                       {{"recv_x", {2, 128}},
                        {"recv_x_scales", {2, 1}},
                        {"recv_src_info", {2}},
                        {"recv_count", {1}},
                        {"recv_layout_range", {1, 2}},
                        {"num_recv", {1}}},
                       {{"T", 2}, {"HB", 1}, {"k", 1}, {"E", 2}});
  RunOracle("deepep_low_latency_dispatch", io);
  const float floor_scale = 1e-4f * (1.0f / 448.0f);
  // Rank 0 (expert 0): rank 0's t1, then rank 1's t1.
  EXPECT_EQ(Out(io, 0, "num_recv"), V({2}));
  EXPECT_EQ(Out(io, 0, "recv_src_info"), V({1, 1}));
  EXPECT_EQ(Out(io, 0, "recv_count"), V({2}));
  EXPECT_EQ(Out(io, 0, "recv_layout_range"), V({0 * 4294967296.0 + 1, 1 * 4294967296.0 + 1}));
  const V q0 = Out(io, 0, "recv_x");
  EXPECT_EQ(q0[0], 448.0);   // 2 * (448 / 2)
  EXPECT_EQ(q0[1], -224.0);  // -1 * 224
  EXPECT_EQ(q0[2], 0.0);
  EXPECT_EQ(q0[128], 448.0);  // rank 1's t1: all ones, amax 1
  EXPECT_EQ(Out(io, 0, "recv_x_scales"), V({static_cast<double>(2.0f * (1.0f / 448.0f)),
                                            static_cast<double>(1.0f * (1.0f / 448.0f))}));
  // Rank 1 (expert 1): rank 0's t0 (all zero), then rank 1's t0.
  EXPECT_EQ(Out(io, 1, "recv_src_info"), V({0, 0}));
  EXPECT_EQ(Out(io, 1, "recv_x_scales")[0], static_cast<double>(floor_scale));
  EXPECT_EQ(Out(io, 1, "recv_x")[0], 0.0);
}

TEST(ExpertParallelOracles, CapacityKeepsTheMostProbableTiesToTheLowerTokenAndPadsWithZeros) {
  // W = 2, E = 2 (L = 1), T = 3, k = 1, C = 2 (cf 1.25 of 1.5 tokens per expert). Rank 0 sends
  // all three tokens to expert 0 with probs .5, .9, .5: t1 and the earlier of the tied t0, t2
  // stay, in token order. Rank 1 sends t0 to expert 0 and t1, t2 to expert 1.
  OracleIo io = MakeIo(2,
                       {{"x", {3, 1}, {{10, 11, 12}, {20, 21, 22}}},
                        {"topk_idx", {3, 1}, {{0, 0, 0}, {0, 1, 1}}},
                        {"topk_probs", {3, 1}, {{.5, .9, .5}, {.3, .2, .1}}}},
                       {{"y", {1, 2, 2, 1}}, {"y_probs", {1, 2, 2}}},
                       {{"T", 3}, {"H", 1}, {"k", 1}, {"E", 2}});
  RunOracle("moe_capacity_alltoall", io);
  EXPECT_EQ(Out(io, 0, "y"), V({10, 11, 20, 0}));
  EXPECT_EQ(Out(io, 0, "y_probs"), V({.5, .9, .3, 0}));
  EXPECT_EQ(Out(io, 1, "y"), V({0, 0, 21, 22}));
  EXPECT_EQ(Out(io, 1, "y_probs"), V({0, 0, .2, .1}));
}

TEST(ExpertParallelOracles, EplbSplitsReceiversOverSendersAsVllmDoes) {
  // W = 4, one slot per rank, rows of one value (rank r's old row holds 10 * r). Expert 0 is on
  // ranks 0 and 1, 1 on rank 2, 2 on rank 3. After: rank 0 wants 1, rank 1 wants 0 (unchanged),
  // ranks 2 and 3 want 0: senders of 0 are {0, 1}, receivers {2, 3}, one each.
  OracleIo io = MakeIo(4,
                       {{"old_map", {4}, {{0, 0, 1, 2}, {0, 0, 1, 2}, {0, 0, 1, 2}, {0, 0, 1, 2}}},
                        {"new_map", {4}, {{1, 0, 0, 0}, {1, 0, 0, 0}, {1, 0, 0, 0}, {1, 0, 0, 0}}},
                        {"w13", {1, 1}, {{0}, {10}, {20}, {30}}},
                        {"w2", {1, 1}, {{0}, {10}, {20}, {30}}}},
                       {{"w13", {1, 1}}, {"w2", {1, 1}}}, {{"Lp", 1}});
  RunOracle("eplb_rearrange", io);
  EXPECT_EQ(Out(io, 0, "w13"), V({20}));  // expert 1 from rank 2
  EXPECT_EQ(Out(io, 1, "w13"), V({10}));  // unchanged
  EXPECT_EQ(Out(io, 2, "w13"), V({0}));   // receiver 0 of expert 0 <- sender 0
  EXPECT_EQ(Out(io, 3, "w2"), V({10}));   // receiver 1 <- sender 1
}

TEST(ExpertParallelOracles, EplbMovesLocallyWhenTheRankHeldTheExpertElseFetchesFromItsSender) {
  // W = 4, two slots per rank. Expert 0 is on ranks 0 and 1 before (S = {0, 1}) and on every
  // rank after; ranks 0 and 1 held it, so the receivers are V = {2, 3}, one per sender. Rank 1
  // also moves rows locally, and expert 3 and 2 come from the only rank holding them.
  const V old_map = {0, 5, 0, 4, 1, 2, 3, 6};
  const V new_map = {0, 3, 4, 0, 0, 1, 0, 2};
  OracleIo io = MakeIo(4,
                       {{"old_map", {8}, {old_map, old_map, old_map, old_map}},
                        {"new_map", {8}, {new_map, new_map, new_map, new_map}},
                        {"w13", {2, 1}, {{0, 1}, {10, 11}, {20, 21}, {30, 31}}},
                        {"w2", {2, 1}, {{0, 1}, {10, 11}, {20, 21}, {30, 31}}}},
                       {{"w13", {2, 1}}, {"w2", {2, 1}}}, {{"Lp", 2}});
  RunOracle("eplb_rearrange", io);
  // Rank 0: row 0 unchanged; row 1 wants 3, held by rank 3 row 0 only.
  EXPECT_EQ(Out(io, 0, "w13"), V({0, 30}));
  // Rank 1: row 0 wants 4, its own row 1 (a local move); row 1 wants 0, its own row 0.
  EXPECT_EQ(Out(io, 1, "w13"), V({11, 10}));
  // Rank 2: row 0 wants 0: S = {0, 1}, V = {2, 3}, n = 1: rank 2 <- S[0] = 0. Row 1 wants 1,
  // its own row 0.
  EXPECT_EQ(Out(io, 2, "w13"), V({0, 20}));
  // Rank 3: row 0 wants 0 <- S[1] = rank 1's first row holding 0 (row 0); row 1 wants 2 <- rank
  // 2 row 1.
  EXPECT_EQ(Out(io, 3, "w2"), V({10, 21}));
}

TEST(ExpertParallelOracles, EplbGivesTheRemainderReceiversToTheFirstSenders) {
  // W = 5, one slot per rank: expert 0 on ranks 0 and 1, wanted by ranks 2, 3 and 4: n = 1,
  // m = 2, so ranks 2 and 3 take senders 0 and 1 and rank 4, the remainder, sender 0 again.
  const V old_map = {0, 0, 1, 2, 3}, new_map = {0, 0, 0, 0, 0};
  OracleIo io = MakeIo(5,
                       {{"old_map", {5}, {old_map, old_map, old_map, old_map, old_map}},
                        {"new_map", {5}, {new_map, new_map, new_map, new_map, new_map}},
                        {"w13", {1, 1}, {{0}, {10}, {20}, {30}, {40}}},
                        {"w2", {1, 1}, {{0}, {10}, {20}, {30}, {40}}}},
                       {{"w13", {1, 1}}, {"w2", {1, 1}}}, {{"Lp", 1}});
  RunOracle("eplb_rearrange", io);
  EXPECT_EQ(Out(io, 2, "w13"), V({0}));
  EXPECT_EQ(Out(io, 3, "w13"), V({10}));
  EXPECT_EQ(Out(io, 4, "w13"), V({0}));
}

}  // namespace
}  // namespace kforge
