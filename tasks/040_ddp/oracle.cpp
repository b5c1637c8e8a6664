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

}  // namespace

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
