// DeePMD-kit LKF step: the gain denominator summed over every rank's blocks,
// each rank's weights and covariances updated, the weights all-gathered.
#include "kforge/oracle.h"

#include <algorithm>
#include <string>
#include <vector>

namespace {

constexpr int kBlocks = 8;

std::string Name(const char* prefix, int i) { return prefix + std::to_string(i); }

}  // namespace

// P_i: symmetric and diagonally dominant (diagonal in [1, 2), off-diagonal
// U(-1, 1) / L), hence positive definite.
KF_INPUT_GENERATOR(deepmd_kalman_filter_optimizer) {
  std::vector<double>& p = gen.tensor->data;
  const int64_t l = gen.tensor->shape.size() == 2 ? gen.tensor->shape[0] : 0;
  if (gen.input_name.rfind("P_", 0) != 0 || l * l != static_cast<int64_t>(p.size())) {
    return kforge::Error(kforge::ErrorKind::kHarness,
                         "deepmd_kalman: no generator for input " + gen.input_name);
  }
  for (int64_t i = 0; i < l; ++i) {
    p[i * l + i] = 1.0 + gen.rng->Uniform();
    for (int64_t j = i + 1; j < l; ++j) {
      const double v = (2.0 * gen.rng->Uniform() - 1.0) / static_cast<double>(l);
      p[i * l + j] = v;
      p[j * l + i] = v;
    }
  }
  return kforge::Status::Ok();
}

KF_ORACLE(deepmd_kalman_filter_optimizer) {
  const double lam = io.param("kalman_lambda");
  const size_t l = io.in(0, "H_0").size();
  // K_i = P_i H_i for every rank and block, and the all-reduced denominator.
  std::vector<std::vector<double>> k(io.world * kBlocks, std::vector<double>(l, 0.0));
  double tmp = 0;
  for (int r = 0; r < io.world; ++r) {
    for (int b = 0; b < kBlocks; ++b) {
      auto h = io.in(r, Name("H_", b));
      auto p = io.in(r, Name("P_", b));
      if (h.size() != l || p.size() != l * l) {
        return kforge::Error(kforge::ErrorKind::kHarness, "deepmd_kalman: block sizes differ");
      }
      std::vector<double>& kb = k[r * kBlocks + b];
      double hph = 0;
      for (size_t i = 0; i < l; ++i) {
        for (size_t j = 0; j < l; ++j) kb[i] += p[i * l + j] * h[j];
        hph += h[i] * kb[i];
      }
      tmp += lam + hph;
    }
  }
  const double a = 1.0 / tmp;
  std::vector<double> gathered(io.world * kBlocks * l);
  for (int r = 0; r < io.world; ++r) {
    const double err = io.in(r, "error")[0];
    for (int b = 0; b < kBlocks; ++b) {
      const std::vector<double>& kb = k[r * kBlocks + b];
      auto w = io.in(r, Name("w_", b));
      for (size_t i = 0; i < l; ++i) gathered[(r * kBlocks + b) * l + i] = w[i] + a * err * kb[i];
      auto p = io.in(r, Name("P_", b));
      auto out = io.out(r, Name("P_", b));
      for (size_t i = 0; i < l; ++i) {
        for (size_t j = 0; j < l; ++j) out[i * l + j] = (p[i * l + j] - a * kb[i] * kb[j]) / lam;
      }
    }
  }
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "weights");
    if (y.size() != gathered.size()) {
      return kforge::Error(kforge::ErrorKind::kHarness, "deepmd_kalman: weights is not W*8*L");
    }
    std::copy(gathered.begin(), gathered.end(), y.begin());
  }
  return kforge::Status::Ok();
}
