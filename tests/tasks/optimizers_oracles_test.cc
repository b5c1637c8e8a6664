// The optimizer-step oracles (tasks 040-043, 047, 063, 086) on tiny hand-computed
// inputs, called through the registry so that each KF_ORACLE registration is
// tested too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kforge/oracle.h"
#include "kforge/oracle_math.h"

namespace kforge {
namespace {

struct Named {
  std::string name;
  std::vector<double> data;
  std::vector<int64_t> shape = {};  // empty: flat
};

// An OracleIo whose rank r holds inputs[r] (every tensor flat) and outputs
// named `outputs` with the given sizes, filled with a sentinel.
OracleIo MakeIo(const std::vector<std::vector<Named>>& inputs,
                const std::vector<std::pair<std::string, size_t>>& outputs,
                std::map<std::string, double> params) {
  OracleIo io;
  io.world = static_cast<int>(inputs.size());
  io.params = std::move(params);
  for (const auto& rank_inputs : inputs) {
    std::vector<OracleTensor> in, out;
    for (const Named& t : rank_inputs) {
      std::vector<int64_t> shape = t.shape;
      if (shape.empty()) shape = {static_cast<int64_t>(t.data.size())};
      in.push_back(OracleTensor{t.name, shape, t.data});
    }
    for (const auto& [name, size] : outputs) {
      out.push_back(
          OracleTensor{name, {static_cast<int64_t>(size)}, std::vector<double>(size, -999)});
    }
    io.inputs.push_back(std::move(in));
    io.outputs.push_back(std::move(out));
  }
  return io;
}

void RunNamed(const char* name, OracleIo& io) {
  const OracleFn* fn = FindOracle(name);
  ASSERT_NE(fn, nullptr) << name << " is not registered";
  Status s = (*fn)(io);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

void ExpectNear(std::span<const double> got, const std::vector<double>& want, double tol = 1e-9) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

const std::map<std::string, double> kAdam = {
    {"lr", 0.05}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}};

// Step 1 from zero moments: m = 0.1 g, v = 0.001 g^2, and the bias-corrected
// update is lr * g / |g| (eps is negligible), so master moves by -lr * sign(g).
TEST(OptimizerOracles, FusedAdamFirstStepMovesByLrAndGathers) {
  OracleIo io = MakeIo(
      {{{"grad", {1.0}}, {"master", {0.5}}, {"exp_avg", {0}}, {"exp_avg_sq", {0}}, {"step", {1}}},
       {{"grad", {-2.0}}, {"master", {1.0}}, {"exp_avg", {0}}, {"exp_avg_sq", {0}}, {"step", {1}}}},
      {{"params", 2}, {"master", 1}, {"exp_avg", 1}, {"exp_avg_sq", 1}}, kAdam);
  RunNamed("fused_adam_grad_unshard_allgather", io);
  for (int r = 0; r < 2; ++r) ExpectNear(io.out(r, "params"), {0.45, 1.05}, 1e-8);
  ExpectNear(io.out(0, "master"), {0.45}, 1e-8);
  ExpectNear(io.out(1, "master"), {1.05}, 1e-8);
  ExpectNear(io.out(0, "exp_avg"), {0.1});
  ExpectNear(io.out(1, "exp_avg"), {-0.2});
  ExpectNear(io.out(0, "exp_avg_sq"), {0.001});
  ExpectNear(io.out(1, "exp_avg_sq"), {0.004});
}

// Step 2 with nonzero moments, by hand: g = 1, m = 0.5, v = 0.25:
// m' = 0.45 + 0.1 = 0.55, v' = 0.24975 + 0.001 = 0.25075,
// m_hat = 0.55 / 0.19, v_hat = 0.25075 / 0.001999, master -= lr m_hat / sqrt(v_hat).
TEST(OptimizerOracles, FusedAdamBiasCorrectsWithTheStepInput) {
  OracleIo io = MakeIo(
      {{{"grad", {1.0}},
        {"master", {0.0}},
        {"exp_avg", {0.5}},
        {"exp_avg_sq", {0.25}},
        {"step", {2}}},
       {{"grad", {0.0}}, {"master", {2.0}}, {"exp_avg", {0}}, {"exp_avg_sq", {1}}, {"step", {2}}}},
      {{"params", 2}, {"master", 1}, {"exp_avg", 1}, {"exp_avg_sq", 1}}, kAdam);
  RunNamed("fused_adam_grad_unshard_allgather", io);
  const double upd0 = 0.05 * (0.55 / 0.19) / (std::sqrt(0.25075 / 0.001999) + 1e-8);
  ExpectNear(io.out(0, "master"), {-upd0});
  ExpectNear(io.out(1, "master"), {2.0});  // g = 0 and m = 0: no move
  ExpectNear(io.out(0, "exp_avg"), {0.55});
  ExpectNear(io.out(1, "exp_avg_sq"), {0.999});
  for (int r = 0; r < 2; ++r) ExpectNear(io.out(r, "params"), {-upd0, 2.0});
}

// One hidden unit, by hand: x = 2, w1 = 1.5, b1 = -1 -> z = 2, h = 2;
// w2 = 0.5, b2 = 0.25 -> out = 1.25; y = 1 -> e = 0.25, loss = 0.0625,
// dout = 2e = 0.5, gw2 = dout * h = 1, gb2 = 0.5, dh = dout * w2 = 0.25,
// gw1 = dh * x = 0.5, gb1 = 0.25. With b1 = -5 the unit is off: only b2 learns.
TEST(OptimizerOracles, LinearReluMseBackwardByHand) {
  auto g =
      om::LinearReluMseBackward({{2.0}}, {{1.0}}, {{1.5}}, {{-1.0}}, {{0.5}}, {{0.25}}, 1, 1, 1, 1);
  EXPECT_DOUBLE_EQ(g.loss, 0.0625);
  EXPECT_DOUBLE_EQ(g.w1[0], 0.5);
  EXPECT_DOUBLE_EQ(g.b1[0], 0.25);
  EXPECT_DOUBLE_EQ(g.w2[0], 1.0);
  EXPECT_DOUBLE_EQ(g.b2[0], 0.5);
  auto off =
      om::LinearReluMseBackward({{2.0}}, {{1.0}}, {{1.5}}, {{-5.0}}, {{0.5}}, {{0.25}}, 1, 1, 1, 1);
  EXPECT_DOUBLE_EQ(off.w1[0], 0.0);
  EXPECT_DOUBLE_EQ(off.b1[0], 0.0);
  EXPECT_DOUBLE_EQ(off.w2[0], 0.0);
  EXPECT_DOUBLE_EQ(off.b2[0], -1.5);  // 2 * (0.25 - 1)
  // Two rows, two outputs: the mean runs over n * d_out = 4 elements.
  auto two = om::LinearReluMseBackward({{1.0, 1.0}}, {{0, 0, 0, 0}}, {{1.0}}, {{0.0}}, {{1.0, 2.0}},
                                       {{0.0, 0.0}}, 2, 1, 1, 2);
  EXPECT_DOUBLE_EQ(two.loss, (1 + 4 + 1 + 4) / 4.0);
  EXPECT_DOUBLE_EQ(two.b2[0], 2 * (0.5 * 1));  // sum over rows of 2 e / 4
  EXPECT_DOUBLE_EQ(two.b2[1], 2 * (0.5 * 2));
}

// The two-rank MLP case shared by the DDP, ZeRO and FSDP tests: rank 0's
// parameters w1 = 1.5, b1 = -1, w2 = 0.5, b2 = 0.25. Rank 0's batch (x 2, y 1)
// gives gradients (0.5, 0.25, 1, 0.5) (see above); rank 1's (x 1, y 0) gives
// z = 0.5, out = 0.5, dout = 1: (0.5, 0.5, 0.5, 1). Averaged: (0.5, 0.375,
// 0.75, 0.75). From zero moments at step 1 Adam moves each parameter by
// -lr * sign(g) = -0.05, and m = 0.1 g, v = 0.001 g^2.
const std::vector<double> kAvgGrad = {0.5, 0.375, 0.75, 0.75};
const std::vector<double> kStepped = {1.45, -1.05, 0.45, 0.2};
const char* const kNames[] = {"W1", "b1", "W2", "b2"};

std::vector<Named> Batch(int rank) {
  return {{"X", {rank == 0 ? 2.0 : 1.0}, {1, 1}}, {"y", {rank == 0 ? 1.0 : 0.0}, {1, 1}}};
}

TEST(OptimizerOracles, DdpUsesRankZerosStateAndTheAverageGradient) {
  std::vector<std::vector<Named>> in(2);
  for (int r = 0; r < 2; ++r) {
    in[r] = Batch(r);
    const double junk = r == 0 ? 0.0 : 9.0;  // rank 1's state must be ignored
    const std::vector<double> params = {1.5, -1.0, 0.5, 0.25};
    for (int k = 0; k < 4; ++k) {
      in[r].push_back({kNames[k], {r == 0 ? params[k] : junk}, {1, 1}});
    }
    for (const char* pre : {"exp_avg_", "exp_avg_sq_"}) {
      for (const char* p : kNames) in[r].push_back({std::string(pre) + p, {junk}});
    }
    in[r].push_back({"step", {1}});
  }
  std::vector<std::pair<std::string, size_t>> outs;
  for (const char* pre : {"", "exp_avg_", "exp_avg_sq_"}) {
    for (const char* p : kNames) outs.push_back({std::string(pre) + p, 1});
  }
  OracleIo io = MakeIo(in, outs, kAdam);
  RunNamed("ddp", io);
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 4; ++k) {
      const std::string p = kNames[k];
      ExpectNear(io.out(r, p), {kStepped[k]}, 1e-8);
      ExpectNear(io.out(r, "exp_avg_" + p), {0.1 * kAvgGrad[k]});
      ExpectNear(io.out(r, "exp_avg_sq_" + p), {0.001 * kAvgGrad[k] * kAvgGrad[k]});
    }
  }
}

// ZeRO with W = 2 and P = 4: rank 0 owns [W1, b1], rank 1 owns [W2, b2].
void ExpectZero(const char* task) {
  std::vector<std::vector<Named>> in(2);
  for (int r = 0; r < 2; ++r) {
    in[r] = Batch(r);
    const std::vector<double> params = {1.5, -1.0, 0.5, 0.25};
    for (int k = 0; k < 4; ++k) in[r].push_back({kNames[k], {r == 0 ? params[k] : 9.0}, {1, 1}});
    in[r].push_back({"exp_avg_part", {0, 0}});
    in[r].push_back({"exp_avg_sq_part", {0, 0}});
    in[r].push_back({"step", {1}});
  }
  OracleIo io = MakeIo(
      in, {{"W1", 1}, {"b1", 1}, {"W2", 1}, {"b2", 1}, {"exp_avg_part", 2}, {"exp_avg_sq_part", 2}},
      kAdam);
  RunNamed(task, io);
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 4; ++k) ExpectNear(io.out(r, kNames[k]), {kStepped[k]}, 1e-8);
    const double g0 = kAvgGrad[2 * r], g1 = kAvgGrad[2 * r + 1];
    ExpectNear(io.out(r, "exp_avg_part"), {0.1 * g0, 0.1 * g1});
    ExpectNear(io.out(r, "exp_avg_sq_part"), {0.001 * g0 * g0, 0.001 * g1 * g1});
  }
}

TEST(OptimizerOracles, Zero1StepsEachPartitionAndGathers) { ExpectZero("zero1_optimizer_shard"); }
TEST(OptimizerOracles, Zero2StepsEachPartitionAndGathers) {
  ExpectZero("zero2_optimizer_shard_grad");
}

// FSDP: rank 0's shard is [W1, b1] = [1.5, -1], rank 1's [W2, b2] = [0.5, 0.25];
// AdamW also decays by lr * wd * theta0 = 5e-4 * theta0.
TEST(OptimizerOracles, FsdpGathersShardsAndStepsAdamW) {
  std::map<std::string, double> params = kAdam;
  params["weight_decay"] = 0.01;
  params["hidden"] = 1;
  const std::vector<double> theta = {1.5, -1.0, 0.5, 0.25};
  std::vector<std::vector<Named>> in(2);
  for (int r = 0; r < 2; ++r) {
    in[r] = Batch(r);
    in[r].push_back({"flat_param_shard", {theta[2 * r], theta[2 * r + 1]}});
    in[r].push_back({"exp_avg_shard", {0, 0}});
    in[r].push_back({"exp_avg_sq_shard", {0, 0}});
    in[r].push_back({"step", {1}});
  }
  OracleIo io =
      MakeIo(in, {{"flat_param_shard", 2}, {"exp_avg_shard", 2}, {"exp_avg_sq_shard", 2}}, params);
  RunNamed("fsdp_step_e2e", io);
  for (int r = 0; r < 2; ++r) {
    std::vector<double> want;
    for (int k = 2 * r; k < 2 * r + 2; ++k)
      want.push_back(theta[k] * 0.9995 + kStepped[k] - theta[k]);
    ExpectNear(io.out(r, "flat_param_shard"), want, 1e-8);
    ExpectNear(io.out(r, "exp_avg_shard"), {0.1 * kAvgGrad[2 * r], 0.1 * kAvgGrad[2 * r + 1]});
  }
}

// Rank 1 (R = 1, C = 2, W = 2): X = [3, 4] / 5 has the single singular value
// 1, and every step maps a singular value s to a s + b s^3 + c s^5 while the
// direction [0.6, 0.8] stays.
TEST(OptimizerOracles, MuonIteratesTheQuinticOnSingularValues) {
  OracleIo io =
      MakeIo({{{"x", {3.0}, {1, 1}}}, {{"x", {4.0}, {1, 1}}}}, {{"y", 1}}, {{"steps", 5}});
  RunNamed("tp_muon_orthogonalization", io);
  const double k[5][3] = {{4.0848, -6.8946, 2.9270},
                          {3.9505, -6.3029, 2.6377},
                          {3.7418, -5.5913, 2.3037},
                          {2.8769, -3.1427, 1.2046},
                          {2.8366, -3.0525, 1.2012}};
  double s = 1.0;
  for (const auto& c : k) s = c[0] * s + c[1] * s * s * s + c[2] * s * s * s * s * s;
  ExpectNear(io.out(0, "y"), {0.6 * s}, 1e-12);
  ExpectNear(io.out(1, "y"), {0.8 * s}, 1e-12);
}

// LKF with W = 2, L = 1 and every block alike (H = 1, P = 2, w = 0), lam = 0.5:
// tmp = 2 ranks * 8 blocks * (0.5 + 1 * 2 * 1) = 40, A = 1/40, K = 2,
// w' = A * error * 2 = 0.05 * error, P' = (2 - A * 4) / 0.5 = 3.8.
TEST(OptimizerOracles, KalmanSumsTheDenominatorOverRanksAndGathers) {
  std::vector<std::vector<Named>> in(2);
  for (int r = 0; r < 2; ++r) {
    for (int b = 0; b < 8; ++b) in[r].push_back({"H_" + std::to_string(b), {1.0}});
    in[r].push_back({"error", {r == 0 ? 1.0 : -1.0}});
    for (int b = 0; b < 8; ++b) in[r].push_back({"w_" + std::to_string(b), {0.0}});
    for (int b = 0; b < 8; ++b) in[r].push_back({"P_" + std::to_string(b), {2.0}, {1, 1}});
  }
  std::vector<std::pair<std::string, size_t>> outs = {{"weights", 16}};
  for (int b = 0; b < 8; ++b) outs.push_back({"P_" + std::to_string(b), 1});
  OracleIo io = MakeIo(in, outs, {{"kalman_lambda", 0.5}});
  RunNamed("deepmd_kalman_filter_optimizer", io);
  std::vector<double> want(16, 0.05);
  for (int i = 8; i < 16; ++i) want[i] = -0.05;
  for (int r = 0; r < 2; ++r) {
    ExpectNear(io.out(r, "weights"), want, 1e-12);
    for (int b = 0; b < 8; ++b) ExpectNear(io.out(r, "P_" + std::to_string(b)), {3.8}, 1e-12);
  }
}

}  // namespace
}  // namespace kforge
