// 2-D FSDP x TP SwiGLU MLP: rank r = f * n_tp + t ends with the sum over its TP group of
// (silu(x_f @ W1_t') * (x_f @ W2_t')) @ W3_t', the weights of TP rank t' gathered over its FSDP
// group.
#include "kforge/oracle.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

namespace {

// The task's grid: TP groups are contiguous (size n_tp), FSDP groups strided (size W / n_tp).
int TpSize(int world) { return std::min(2, world / 2); }

}  // namespace

KF_ORACLE(fsdp_and_tp) {
  const auto b = static_cast<int64_t>(io.param("B"));
  const auto d = static_cast<int64_t>(io.param("D"));
  const auto fl = static_cast<int64_t>(io.param("Fl"));
  const int n_tp = TpSize(io.world), n_f = io.world / n_tp;
  const int64_t dc = d / n_f;  // rows of w1/w2, columns of w3 held by one rank
  // Each TP rank's full weights, assembled from its FSDP group (ranks t, t + n_tp, ...).
  std::vector<std::vector<double>> w1(n_tp), w2(n_tp), w3(n_tp);
  for (int t = 0; t < n_tp; ++t) {
    w3[t].assign(static_cast<size_t>(fl * d), 0.0);
    for (int f = 0; f < n_f; ++f) {
      const int r = f * n_tp + t;
      auto s1 = io.in(r, "w1"), s2 = io.in(r, "w2"), s3 = io.in(r, "w3");
      w1[t].insert(w1[t].end(), s1.begin(), s1.end());
      w2[t].insert(w2[t].end(), s2.begin(), s2.end());
      for (int64_t i = 0; i < fl; ++i)
        for (int64_t j = 0; j < dc; ++j) w3[t][i * d + f * dc + j] = s3[i * dc + j];
    }
  }
  // Each rank's partial uses its own x (the TP ranks of one FSDP rank hold the same tokens).
  std::vector<double> u1(static_cast<size_t>(b * fl)), u2(u1.size()), y(static_cast<size_t>(b * d));
  for (int f = 0; f < n_f; ++f) {
    for (int t = 0; t < n_tp; ++t) {
      auto x = io.in(f * n_tp + t, "x");
      kforge::om::Gemm(x, w1[t], u1, b, fl, d);
      kforge::om::Gemm(x, w2[t], u2, b, fl, d);
      for (size_t i = 0; i < u1.size(); ++i) u1[i] = kforge::om::Silu(u1[i]) * u2[i];
      kforge::om::Gemm(u1, w3[t], y, b, d, fl, false, false, 1.0, t == 0 ? 0.0 : 1.0);
    }
    for (int t = 0; t < n_tp; ++t) {
      auto out = io.out(f * n_tp + t, "y");
      std::copy(y.begin(), y.end(), out.begin());
    }
  }
  return kforge::Status::Ok();
}
