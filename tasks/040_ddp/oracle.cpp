// DDP + Adam: rank 0's parameters and moments, the gradient averaged over
// every rank's batch, one Adam step; every rank ends with the same state.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "kforge/oracle_math.h"

namespace {

const char* const kParams[] = {"W1", "b1", "W2", "b2"};

// The expected std of the averaged gradient of each parameter (task.toml
// derives them): what the moments are drawn relative to.
double GradScale(const std::string& param, const std::map<std::string, double>& vars) {
  const double b = vars.at("B"), d_in = vars.at("d_in"), hidden = vars.at("hidden"),
               d_out = vars.at("d_out");
  // 1.25 x the rms of the averaged gradient of an O(1) MSE, including the part
  // that does not average out over the batch (relu's positive mean biases every
  // output column); task.toml gives the same formulas.
  if (param == "W1")
    return 1.25 * std::sqrt(0.11 / (d_out * hidden * d_in) + 1 / (hidden * hidden * d_in) +
                            3 / (b * d_out * hidden));
  if (param == "b1")
    return 1.25 *
           std::sqrt(0.17 / (d_out * hidden) + 0.64 / (hidden * hidden) + 3 / (b * d_out * hidden));
  if (param == "W2") return 1.25 * std::sqrt(0.11 + 3 / b) / d_out;
  return 1.25 * std::sqrt(0.68 + 6 / b) / d_out;
}

}  // namespace

KF_INPUT_GENERATOR(ddp) {
  const std::string& name = gen.input_name;
  std::vector<double>& out = gen.tensor->data;
  if (name == "W1" || name == "W2") {
    const double fan_in = gen.params.at(name == "W1" ? "d_in" : "hidden");
    for (double& x : out) x = gen.rng->Normal() / std::sqrt(fan_in);
    return kforge::Status::Ok();
  }
  for (const char* kind : {"exp_avg_sq_", "exp_avg_"}) {
    const std::string prefix(kind);
    if (name.rfind(prefix, 0) != 0) continue;
    const double s = GradScale(name.substr(prefix.size()), gen.params);
    if (prefix == "exp_avg_") {
      for (double& x : out) x = 0.2 * s * gen.rng->Normal();
    } else {
      for (double& x : out) x = s * s * (0.02 + 0.08 * gen.rng->Uniform());
    }
    return kforge::Status::Ok();
  }
  return kforge::Error(kforge::ErrorKind::kHarness, "ddp: no generator for input " + name);
}

KF_ORACLE(ddp) {
  const int64_t n = io.in_shape(0, "X")[0];
  const int64_t d_in = io.in_shape(0, "X")[1];
  const int64_t d_out = io.in_shape(0, "y")[1];
  const int64_t hidden = io.in_shape(0, "W1")[0];
  kforge::om::AdamConfig cfg;
  cfg.lr = io.param("lr");
  cfg.beta1 = io.param("beta1");
  cfg.beta2 = io.param("beta2");
  cfg.eps = io.param("eps");
  cfg.weight_decay = 0.0;
  cfg.step = static_cast<int64_t>(io.in(0, "step")[0]);
  if (cfg.step < 1) return kforge::Error(kforge::ErrorKind::kHarness, "ddp: step must be >= 1");

  // Every rank computes its gradient with rank 0's (broadcast) parameters.
  std::vector<std::vector<double>> grad(4);
  for (int r = 0; r < io.world; ++r) {
    kforge::om::LinearReluMseGrads g = kforge::om::LinearReluMseBackward(
        io.in(r, "X"), io.in(r, "y"), io.in(0, "W1"), io.in(0, "b1"), io.in(0, "W2"),
        io.in(0, "b2"), n, d_in, hidden, d_out);
    const std::vector<double>* parts[] = {&g.w1, &g.b1, &g.w2, &g.b2};
    for (int k = 0; k < 4; ++k) {
      if (grad[k].empty()) grad[k].assign(parts[k]->size(), 0.0);
      for (size_t i = 0; i < grad[k].size(); ++i) grad[k][i] += (*parts[k])[i] / io.world;
    }
  }
  for (int k = 0; k < 4; ++k) {
    const std::string p = kParams[k];
    std::vector<double> param(io.in(0, p).begin(), io.in(0, p).end());
    std::vector<double> m(io.in(0, "exp_avg_" + p).begin(), io.in(0, "exp_avg_" + p).end());
    std::vector<double> v(io.in(0, "exp_avg_sq_" + p).begin(), io.in(0, "exp_avg_sq_" + p).end());
    kforge::om::AdamStep(param, grad[k], m, v, cfg);
    for (int r = 0; r < io.world; ++r) {
      std::copy(param.begin(), param.end(), io.out(r, p).begin());
      std::copy(m.begin(), m.end(), io.out(r, "exp_avg_" + p).begin());
      std::copy(v.begin(), v.end(), io.out(r, "exp_avg_sq_" + p).begin());
    }
  }
  return kforge::Status::Ok();
}
