// ZeRO-2 (the same outputs as ZeRO-1): rank 0's parameters, the gradient averaged over every rank's
// batch, Adam on each rank's partition of the flat parameters [W1 | b1 | W2 | b2], and the updated
// parameters all-gathered onto every rank.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "kforge/oracle_math.h"

namespace {

const char* const kParams[] = {"W1", "b1", "W2", "b2"};

// The expected std of the averaged gradient of flat element i (task.toml
// derives them): what the moments are drawn relative to.
double GradScale(int64_t i, const std::map<std::string, double>& vars) {
  const double end_w1 = vars.at("hidden") * vars.at("d_in"), end_b1 = end_w1 + vars.at("hidden"),
               end_w2 = end_b1 + vars.at("d_out") * vars.at("hidden");
  const double at = static_cast<double>(i);
  const double b = vars.at("B"), d_in = vars.at("d_in"), hidden = vars.at("hidden"),
               d_out = vars.at("d_out");
  // 1.25 x the rms of the averaged gradient of an O(1) MSE, including the part
  // that does not average out over the batch (relu's positive mean biases every
  // output column); task.toml gives the same formulas.
  if (at < end_w1)
    return 1.25 * std::sqrt(0.11 / (d_out * hidden * d_in) + 1 / (hidden * hidden * d_in) +
                            3 / (b * d_out * hidden));
  if (at < end_b1)
    return 1.25 *
           std::sqrt(0.17 / (d_out * hidden) + 0.64 / (hidden * hidden) + 3 / (b * d_out * hidden));
  if (at < end_w2) return 1.25 * std::sqrt(0.11 + 3 / b) / d_out;
  return 1.25 * std::sqrt(0.68 + 6 / b) / d_out;
}

}  // namespace

KF_INPUT_GENERATOR(zero2_optimizer_shard_grad) {
  const std::string& name = gen.input_name;
  std::vector<double>& out = gen.tensor->data;
  if (name == "W1" || name == "W2") {
    const double fan_in = gen.params.at(name == "W1" ? "d_in" : "hidden");
    for (double& x : out) x = gen.rng->Normal() / std::sqrt(fan_in);
    return kforge::Status::Ok();
  }
  if (name != "exp_avg_part" && name != "exp_avg_sq_part") {
    return kforge::Error(kforge::ErrorKind::kHarness, "zero2: no generator for input " + name);
  }
  const int64_t part = static_cast<int64_t>(out.size());
  for (int64_t i = 0; i < part; ++i) {
    const double s = GradScale(gen.rank * part + i, gen.params);
    out[i] = name == "exp_avg_part" ? 0.2 * s * gen.rng->Normal()
                                    : s * s * (0.02 + 0.08 * gen.rng->Uniform());
  }
  return kforge::Status::Ok();
}

KF_ORACLE(zero2_optimizer_shard_grad) {
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
  if (cfg.step < 1) return kforge::Error(kforge::ErrorKind::kHarness, "zero2: step must be >= 1");

  // Flat parameters (rank 0's) and the flat gradient averaged over ranks.
  std::vector<double> theta, grad;
  for (const char* p : kParams) theta.insert(theta.end(), io.in(0, p).begin(), io.in(0, p).end());
  grad.assign(theta.size(), 0.0);
  for (int r = 0; r < io.world; ++r) {
    kforge::om::LinearReluMseGrads g = kforge::om::LinearReluMseBackward(
        io.in(r, "X"), io.in(r, "y"), io.in(0, "W1"), io.in(0, "b1"), io.in(0, "W2"),
        io.in(0, "b2"), n, d_in, hidden, d_out);
    size_t at = 0;
    for (const std::vector<double>* part : {&g.w1, &g.b1, &g.w2, &g.b2}) {
      for (double x : *part) grad[at++] += x / io.world;
    }
  }
  const size_t part = theta.size() / io.world;
  if (part * io.world != theta.size() || io.in(0, "exp_avg_part").size() != part) {
    return kforge::Error(kforge::ErrorKind::kHarness, "zero2: partitions do not tile P");
  }
  for (int r = 0; r < io.world; ++r) {
    auto m = io.out(r, "exp_avg_part");
    auto v = io.out(r, "exp_avg_sq_part");
    std::copy(io.in(r, "exp_avg_part").begin(), io.in(r, "exp_avg_part").end(), m.begin());
    std::copy(io.in(r, "exp_avg_sq_part").begin(), io.in(r, "exp_avg_sq_part").end(), v.begin());
    std::span<double> slice(theta.data() + r * part, part);
    kforge::om::AdamStep(slice, std::span<const double>(grad.data() + r * part, part), m, v, cfg);
  }
  for (int r = 0; r < io.world; ++r) {
    size_t at = 0;
    for (const char* p : kParams) {
      auto out = io.out(r, p);
      std::copy(theta.begin() + at, theta.begin() + at + out.size(), out.begin());
      at += out.size();
    }
  }
  return kforge::Status::Ok();
}
