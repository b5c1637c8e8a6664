// FSDP + AdamW: the flat parameters gathered from every rank's shard, the
// gradient averaged over every rank's batch and scattered by shard, AdamW on
// each shard.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(fsdp_step_e2e) {
  const int64_t n = io.in_shape(0, "X")[0];
  const int64_t d_in = io.in_shape(0, "X")[1];
  const int64_t d_out = io.in_shape(0, "y")[1];
  const int64_t hidden = static_cast<int64_t>(io.param("hidden"));
  kforge::om::AdamConfig cfg;
  cfg.lr = io.param("lr");
  cfg.beta1 = io.param("beta1");
  cfg.beta2 = io.param("beta2");
  cfg.eps = io.param("eps");
  cfg.weight_decay = io.param("weight_decay");
  cfg.decoupled = true;
  cfg.step = static_cast<int64_t>(io.in(0, "step")[0]);
  if (cfg.step < 1) return kforge::Error(kforge::ErrorKind::kHarness, "fsdp: step must be >= 1");

  std::vector<double> theta;
  for (int r = 0; r < io.world; ++r) {
    auto shard = io.in(r, "flat_param_shard");
    theta.insert(theta.end(), shard.begin(), shard.end());
  }
  const int64_t sizes[4] = {hidden * d_in, hidden, d_out * hidden, d_out};
  if (static_cast<int64_t>(theta.size()) != sizes[0] + sizes[1] + sizes[2] + sizes[3]) {
    return kforge::Error(kforge::ErrorKind::kHarness, "fsdp: shards do not tile P");
  }
  std::span<const double> w1(theta.data(), sizes[0]);
  std::span<const double> b1(w1.data() + sizes[0], sizes[1]);
  std::span<const double> w2(b1.data() + sizes[1], sizes[2]);
  std::span<const double> b2(w2.data() + sizes[2], sizes[3]);
  std::vector<double> grad(theta.size(), 0.0);
  for (int r = 0; r < io.world; ++r) {
    kforge::om::LinearReluMseGrads g = kforge::om::LinearReluMseBackward(
        io.in(r, "X"), io.in(r, "y"), w1, b1, w2, b2, n, d_in, hidden, d_out);
    size_t at = 0;
    for (const std::vector<double>* part : {&g.w1, &g.b1, &g.w2, &g.b2}) {
      for (double x : *part) grad[at++] += x / io.world;
    }
  }
  const size_t part = theta.size() / io.world;
  for (int r = 0; r < io.world; ++r) {
    auto p = io.out(r, "flat_param_shard");
    auto m = io.out(r, "exp_avg_shard");
    auto v = io.out(r, "exp_avg_sq_shard");
    std::copy(io.in(r, "flat_param_shard").begin(), io.in(r, "flat_param_shard").end(), p.begin());
    std::copy(io.in(r, "exp_avg_shard").begin(), io.in(r, "exp_avg_shard").end(), m.begin());
    std::copy(io.in(r, "exp_avg_sq_shard").begin(), io.in(r, "exp_avg_sq_shard").end(), v.begin());
    kforge::om::AdamStep(p, std::span<const double>(grad.data() + r * part, part), m, v, cfg);
  }
  return kforge::Status::Ok();
}
