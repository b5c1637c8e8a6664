// fp8 reduce-scatter with delayed scaling: every rank's gradient goes through
// an e4m3 round trip with that rank's scale; rank r gets the mean of row r.
// The fp32 steps the task specifies are evaluated in float, as a kernel does.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

namespace {

constexpr int kHistory = 16;

std::vector<double> RoundTrip(std::span<const double> g, std::span<const double> hist,
                              std::span<double> hist_out) {
  double amax = 0;
  for (double v : g) amax = std::max(amax, std::fabs(v));
  for (int j = 0; j + 1 < kHistory; ++j) hist_out[j] = hist[j + 1];
  hist_out[kHistory - 1] = kforge::om::RoundToBf16(amax);
  double a = kforge::om::RoundToBf16(1e-12);
  for (double v : hist_out) a = std::max(a, v);
  const float s = static_cast<float>(a) / 448.0f;
  std::vector<double> recon(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double q = kforge::om::RoundToE4M3(static_cast<double>(static_cast<float>(g[i]) / s));
    recon[i] = kforge::om::RoundToBf16(static_cast<double>(static_cast<float>(q) * s));
  }
  return recon;
}

}  // namespace

KF_ORACLE(fp8_reduce_scatter_grads) {
  const int w = io.world;
  const size_t n = io.in(0, "g").size();
  if (n % w != 0)
    return kforge::Error(kforge::ErrorKind::kHarness, "fp8_reduce_scatter_grads: g is not [W, P]");
  const size_t p = n / w;
  for (int r = 0; r < w; ++r) {
    if (io.in(r, "g").size() != n || io.in(r, "hist").size() != kHistory ||
        io.out(r, "hist_out").size() != kHistory)
      return kforge::Error(kforge::ErrorKind::kHarness, "fp8_reduce_scatter_grads: bad shapes");
  }
  // Each rank's round trip is its own: ranks in parallel.
  std::vector<std::vector<double>> recon(static_cast<size_t>(w));
  kforge::OracleParallelFor(w, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int rank = static_cast<int>(r);
      recon[r] = RoundTrip(io.in(rank, "g"), io.in(rank, "hist"), io.out(rank, "hist_out"));
    }
  });
  for (int r = 0; r < w; ++r) {
    auto shard = io.out(r, "shard");
    if (shard.size() != p)
      return kforge::Error(kforge::ErrorKind::kHarness,
                           "fp8_reduce_scatter_grads: shard is not [P]");
    for (size_t i = 0; i < p; ++i) {
      double s = 0;
      for (int q = 0; q < w; ++q) s += recon[q][r * p + i];
      shard[i] = s / w;
    }
  }
  return kforge::Status::Ok();
}
