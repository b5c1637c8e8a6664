// The oracles of tasks 021-025, 030 and 080 (gradient clipping, losses, LoRA
// gradient sync, Sinkhorn-Knopp) on tiny hand-computed inputs, called through
// the registry so that each task's KF_ORACLE registration is tested too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "kforge/oracle.h"

namespace kforge {
namespace {

struct Named {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<double> data;
};

// One rank's tensors: inputs with values, outputs by shape (filled with a
// sentinel the oracle must overwrite).
struct RankIo {
  std::vector<Named> in;
  std::vector<Named> out;
};

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

OracleIo MakeIo(const std::vector<RankIo>& ranks, std::map<std::string, double> params = {}) {
  OracleIo io;
  io.world = static_cast<int>(ranks.size());
  io.params = std::move(params);
  for (const RankIo& r : ranks) {
    std::vector<OracleTensor> in, out;
    for (const Named& t : r.in) in.push_back(OracleTensor{t.name, t.shape, t.data});
    for (const Named& t : r.out) {
      out.push_back(OracleTensor{t.name, t.shape,
                                 std::vector<double>(static_cast<size_t>(Numel(t.shape)), -999)});
    }
    io.inputs.push_back(std::move(in));
    io.outputs.push_back(std::move(out));
  }
  return io;
}

void RunOracle(const char* name, OracleIo& io) {
  const OracleFn* fn = FindOracle(name);
  ASSERT_NE(fn, nullptr) << name << " is not registered";
  Status s = (*fn)(io);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

std::vector<double> Out(OracleIo& io, int rank, const char* name) {
  auto y = io.out(rank, name);
  return {y.begin(), y.end()};
}

TEST(LossesGradsOracles, AllRegistered) {
  for (const char* name :
       {"clip_grad_norm_no_ep", "clip_grad_norm_ep", "grad_acc_loss", "load_balancing_loss",
        "importance_sampling_loss", "moe_epgroupgemm_lora_backward", "sinkhorn_knopp"}) {
    EXPECT_NE(FindOracle(name), nullptr) << name;
  }
}

// Clip-grad-norm ranks: g0 = a, g1 = b, g2 = c (one element each), plus the
// inout state of each and total_norm.
RankIo ClipRank(double a, double b, double c) {
  return {{{"g0", {1, 1}, {a}}, {"g1", {1, 1}, {b}}, {"g2", {1}, {c}}},
          {{"total_norm", {1}, {}}, {"g0", {1, 1}, {}}, {"g1", {1, 1}, {}}, {"g2", {1}, {}}}};
}

TEST(LossesGradsOracles, ClipGradNormScalesEveryShardByTheGlobalNorm) {
  // Global gradient (3, 4, 0, 0, 0, 0): norm 5, coef 1/5.
  OracleIo io = MakeIo({ClipRank(3, 0, 0), ClipRank(0, 4, 0)}, {{"max_norm", 1.0}});
  RunOracle("clip_grad_norm_no_ep", io);
  for (int r = 0; r < 2; ++r) EXPECT_DOUBLE_EQ(Out(io, r, "total_norm")[0], 5.0);
  EXPECT_DOUBLE_EQ(Out(io, 0, "g0")[0], 0.6);
  EXPECT_DOUBLE_EQ(Out(io, 1, "g1")[0], 0.8);
  EXPECT_DOUBLE_EQ(Out(io, 1, "g2")[0], 0.0);
}

TEST(LossesGradsOracles, ClipGradNormLeavesSmallGradientsAlone) {
  OracleIo io = MakeIo({ClipRank(3, 0, 0), ClipRank(0, 4, 0)}, {{"max_norm", 10.0}});
  RunOracle("clip_grad_norm_no_ep", io);
  EXPECT_DOUBLE_EQ(Out(io, 0, "total_norm")[0], 5.0);
  EXPECT_DOUBLE_EQ(Out(io, 0, "g0")[0], 3.0);
  EXPECT_DOUBLE_EQ(Out(io, 1, "g1")[0], 4.0);
}

RankIo EpRank(double non_ep, double ep) {
  return {{{"non_ep", {1, 1}, {non_ep}}, {"ep", {1, 1}, {ep}}},
          {{"total_norm", {1}, {}}, {"non_ep", {1, 1}, {}}, {"ep", {1, 1}, {}}}};
}

TEST(LossesGradsOracles, ClipGradNormEpScalesExpertGradsByOneOverEpSize) {
  // W = 4: ep_size 2, so every ep value 2 counts as 1; the norm is sqrt(4 + 4).
  OracleIo io =
      MakeIo({EpRank(1, 2), EpRank(1, 2), EpRank(1, 2), EpRank(1, 2)}, {{"max_norm", 1.0}});
  RunOracle("clip_grad_norm_ep", io);
  const double norm = std::sqrt(8.0);
  for (int r = 0; r < 4; ++r) {
    EXPECT_DOUBLE_EQ(Out(io, r, "total_norm")[0], norm);
    EXPECT_DOUBLE_EQ(Out(io, r, "non_ep")[0], 1.0 / norm);
    EXPECT_DOUBLE_EQ(Out(io, r, "ep")[0], 1.0 / norm);
  }
  // W = 2: ep_size 1 and the norm sqrt(1 + 1 + 4 + 4) is not above max_norm 4.
  OracleIo io2 = MakeIo({EpRank(1, 2), EpRank(1, 2)}, {{"max_norm", 4.0}});
  RunOracle("clip_grad_norm_ep", io2);
  EXPECT_DOUBLE_EQ(Out(io2, 0, "total_norm")[0], std::sqrt(10.0));
  EXPECT_DOUBLE_EQ(Out(io2, 1, "ep")[0], 2.0);
}

RankIo AccRank(double loss, double local, double global, double gn, double gs) {
  return {{{"loss", {1}, {loss}},
           {"local_valid_tokens", {1}, {local}},
           {"global_valid_tokens", {1}, {global}},
           {"grad_normalized_loss", {1}, {gn}},
           {"grad_loss_sum", {1}, {gs}}},
          {{"normalized_loss", {1}, {}}, {"loss_sum", {1}, {}}, {"grad_loss", {1}, {}}}};
}

TEST(LossesGradsOracles, GradAccLossZeroesTheEmptyRanksNan) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  OracleIo io = MakeIo({AccRank(2, 10, 40, 1, 0.5), AccRank(nan, 0, 40, 1, 0.5)});
  RunOracle("grad_acc_loss", io);
  for (int r = 0; r < 2; ++r) {
    EXPECT_DOUBLE_EQ(Out(io, r, "loss_sum")[0], 20.0);
    EXPECT_DOUBLE_EQ(Out(io, r, "normalized_loss")[0], 0.5);
  }
  EXPECT_DOUBLE_EQ(Out(io, 0, "grad_loss")[0], 10.0 / 40 + 0.5 * 10);
  EXPECT_DOUBLE_EQ(Out(io, 1, "grad_loss")[0], 0.0);
}

RankIo LbRank(std::vector<double> logits) {
  return {{{"gate_logits", {2, 2}, std::move(logits)}}, {{"loss", {1}, {}}}};
}

TEST(LossesGradsOracles, LoadBalancingLossIsTheMeanOfPerRankLosses) {
  const double l3 = std::log(3.0);
  // Rank 0: p = (.25, .75), (.75, .25): f = P = (.5, .5), loss 2 * .5 = 1.
  // Rank 1: p = (.25, .75) twice: f = (0, 1), P = (.25, .75), loss 2 * .75 = 1.5.
  OracleIo io = MakeIo({LbRank({0, l3, l3, 0}), LbRank({0, l3, 0, l3})}, {{"top_k", 1}});
  RunOracle("load_balancing_loss", io);
  for (int r = 0; r < 2; ++r) EXPECT_NEAR(Out(io, r, "loss")[0], 1.25, 1e-12);
  // top_k = E: every expert is selected by every token, f = 1, loss = E * sum P = 2.
  OracleIo all = MakeIo({LbRank({0, l3, l3, 0}), LbRank({0, l3, 0, l3})}, {{"top_k", 2}});
  RunOracle("load_balancing_loss", all);
  EXPECT_NEAR(Out(all, 0, "loss")[0], 2.0, 1e-12);
}

RankIo IsRank(double h, double label, double old_lp, double adv) {
  return {{{"hidden_states", {1, 1}, {h}},
           {"weight", {2, 1}, {1, 0}},
           {"labels", {1}, {label}},
           {"old_logprobs", {1}, {old_lp}},
           {"advantages", {1}, {adv}}},
          {{"loss", {1}, {}},
           {"per_token_logprobs", {1}, {}},
           {"per_token_loss", {1}, {}},
           {"metrics", {5}, {}}}};
}

TEST(LossesGradsOracles, ImportanceSamplingLossOnOneValidToken) {
  // Rank 0: logits (ln 3, 0), label 0: ce = ln(4/3); old_lp chosen so that
  // ratio = 2. Rank 1's only token is ignored.
  const double lp = -std::log(4.0 / 3.0);
  OracleIo io = MakeIo({IsRank(std::log(3.0), 0, lp - std::log(2.0), 1), IsRank(5, -100, -3, 7)},
                       {{"ignore_index", -100}});
  RunOracle("importance_sampling_loss", io);
  EXPECT_NEAR(Out(io, 0, "per_token_logprobs")[0], lp, 1e-12);
  EXPECT_NEAR(Out(io, 0, "per_token_loss")[0], -2.0, 1e-12);
  EXPECT_DOUBLE_EQ(Out(io, 1, "per_token_logprobs")[0], 0.0);
  EXPECT_DOUBLE_EQ(Out(io, 1, "per_token_loss")[0], 0.0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NEAR(Out(io, r, "loss")[0], -2.0, 1e-12);
    const std::vector<double> m = Out(io, r, "metrics");
    EXPECT_NEAR(m[0], 2.0, 1e-12);
    EXPECT_NEAR(m[1], 2.0, 1e-12);
    EXPECT_NEAR(m[2], 2.0, 1e-12);
    EXPECT_NEAR(m[3], 2.0 - std::log(2.0) - 1.0, 1e-12);
    EXPECT_NEAR(m[4], -lp, 1e-12);
  }
}

TEST(LossesGradsOracles, LoraBackwardSumsAllThreeInPlace) {
  auto rank = [](double a, double b, double c) {
    return RankIo{{{"grad_fc1_1_lora_A", {1, 1, 2}, {a, -a}},
                   {"grad_fc1_2_lora_A", {1, 1, 2}, {b, 2 * b}},
                   {"grad_fc2_lora_B", {1, 2, 1}, {c, 0}}},
                  {{"grad_fc1_1_lora_A", {1, 1, 2}, {}},
                   {"grad_fc1_2_lora_A", {1, 1, 2}, {}},
                   {"grad_fc2_lora_B", {1, 2, 1}, {}}}};
  };
  OracleIo io = MakeIo({rank(1, 2, 3), rank(10, 20, 30), rank(100, 200, 300)});
  RunOracle("moe_epgroupgemm_lora_backward", io);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(Out(io, r, "grad_fc1_1_lora_A"), (std::vector<double>{111, -111}));
    EXPECT_EQ(Out(io, r, "grad_fc1_2_lora_A"), (std::vector<double>{222, 444}));
    EXPECT_EQ(Out(io, r, "grad_fc2_lora_B"), (std::vector<double>{333, 0}));
  }
}

TEST(LossesGradsOracles, SinkhornNormalisesPrototypesGloballyAndSamplesLocally) {
  auto rank = [](std::vector<double> x) {
    return RankIo{{{"teacher_output", {1, 2}, std::move(x)}}, {{"q", {1, 2}, {}}}};
  };
  // temp 1: Q columns (1, 3) and (1, 1); prototype sums 2 and 4, so after the
  // row step the columns are (1/4, 3/8) and (1/4, 1/8), normalised to sum 1.
  OracleIo io = MakeIo({rank({0, std::log(3.0)}), rank({0, 0})},
                       {{"teacher_temp", 1.0}, {"n_iterations", 1}});
  RunOracle("sinkhorn_knopp", io);
  const std::vector<double> q0 = Out(io, 0, "q"), q1 = Out(io, 1, "q");
  EXPECT_NEAR(q0[0], 0.4, 1e-12);
  EXPECT_NEAR(q0[1], 0.6, 1e-12);
  EXPECT_NEAR(q1[0], 2.0 / 3, 1e-12);
  EXPECT_NEAR(q1[1], 1.0 / 3, 1e-12);
}

}  // namespace
}  // namespace kforge
