// fp8 all-gather with delayed scaling: each rank's shard goes through an e4m3
// round trip with that rank's scale, then every rank holds all of them. The
// fp32 steps the task specifies (scale, division, product) are evaluated in
// float here, so the expected values are the exact ones a kernel produces.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

namespace {

constexpr int kHistory = 16;

// The shard's round trip with the scale its updated history gives.
std::vector<double> RoundTrip(std::span<const double> p, std::span<const double> hist,
                              std::span<double> hist_out) {
  double amax = 0;
  for (double v : p) amax = std::max(amax, std::fabs(v));
  for (int j = 0; j + 1 < kHistory; ++j) hist_out[j] = hist[j + 1];
  hist_out[kHistory - 1] = kforge::om::RoundToBf16(amax);
  double a = kforge::om::RoundToBf16(1e-12);
  for (double v : hist_out) a = std::max(a, v);
  const float s = static_cast<float>(a) / 448.0f;
  std::vector<double> recon(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const double q = kforge::om::RoundToE4M3(static_cast<double>(static_cast<float>(p[i]) / s));
    recon[i] = kforge::om::RoundToBf16(static_cast<double>(static_cast<float>(q) * s));
  }
  return recon;
}

}  // namespace

KF_ORACLE(fp8_allgather_params) {
  const size_t n = io.in(0, "p").size();
  std::vector<std::vector<double>> recon(static_cast<size_t>(io.world));
  for (int r = 0; r < io.world; ++r) {
    auto hist = io.in(r, "hist");
    auto hist_out = io.out(r, "hist_out");
    if (io.in(r, "p").size() != n || hist.size() != kHistory || hist_out.size() != kHistory)
      return kforge::Error(kforge::ErrorKind::kHarness, "fp8_allgather_params: bad shapes");
    recon[r] = RoundTrip(io.in(r, "p"), hist, hist_out);
  }
  for (int r = 0; r < io.world; ++r) {
    auto full = io.out(r, "full");
    if (full.size() != n * io.world)
      return kforge::Error(kforge::ErrorKind::kHarness, "fp8_allgather_params: full is not [W, P]");
    for (int q = 0; q < io.world; ++q)
      std::copy(recon[q].begin(), recon[q].end(), full.begin() + q * n);
  }
  return kforge::Status::Ok();
}
