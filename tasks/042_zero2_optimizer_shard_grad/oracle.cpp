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

}  // namespace

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
