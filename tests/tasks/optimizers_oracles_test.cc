// The optimizer-step oracles (tasks 040-043, 047) on tiny hand-computed
// inputs, called through the registry so that each KF_ORACLE registration is
// tested too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kforge/oracle.h"

namespace kforge {
namespace {

struct Named {
  std::string name;
  std::vector<double> data;
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
      in.push_back(OracleTensor{t.name, {static_cast<int64_t>(t.data.size())}, t.data});
    }
    for (const auto& [name, size] : outputs) {
      out.push_back(OracleTensor{name, {static_cast<int64_t>(size)}, std::vector<double>(size, -999)});
    }
    io.inputs.push_back(std::move(in));
    io.outputs.push_back(std::move(out));
  }
  return io;
}

void Run(const char* name, OracleIo& io) {
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
  OracleIo io = MakeIo({{{"grad", {1.0}}, {"master", {0.5}}, {"exp_avg", {0}}, {"exp_avg_sq", {0}},
                         {"step", {1}}},
                        {{"grad", {-2.0}}, {"master", {1.0}}, {"exp_avg", {0}}, {"exp_avg_sq", {0}},
                         {"step", {1}}}},
                       {{"params", 2}, {"master", 1}, {"exp_avg", 1}, {"exp_avg_sq", 1}}, kAdam);
  Run("fused_adam_grad_unshard_allgather", io);
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
  OracleIo io = MakeIo({{{"grad", {1.0}}, {"master", {0.0}}, {"exp_avg", {0.5}}, {"exp_avg_sq", {0.25}},
                         {"step", {2}}},
                        {{"grad", {0.0}}, {"master", {2.0}}, {"exp_avg", {0}}, {"exp_avg_sq", {1}},
                         {"step", {2}}}},
                       {{"params", 2}, {"master", 1}, {"exp_avg", 1}, {"exp_avg_sq", 1}}, kAdam);
  Run("fused_adam_grad_unshard_allgather", io);
  const double upd0 = 0.05 * (0.55 / 0.19) / (std::sqrt(0.25075 / 0.001999) + 1e-8);
  ExpectNear(io.out(0, "master"), {-upd0});
  ExpectNear(io.out(1, "master"), {2.0});  // g = 0 and m = 0: no move
  ExpectNear(io.out(0, "exp_avg"), {0.55});
  ExpectNear(io.out(1, "exp_avg_sq"), {0.999});
  for (int r = 0; r < 2; ++r) ExpectNear(io.out(r, "params"), {-upd0, 2.0});
}

}  // namespace
}  // namespace kforge
