// SigLIP's sigmoid loss of each rank's images against every rank's text
// shard, in fp64: the own shard with labels +1 on the diagonal, every other
// shard negative-only, summed directly (no ring) and divided by B.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace {

// log(1 + exp(x)), without overflow.
double Softplus(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }

}  // namespace

KF_ORACLE(openclip_contrastive_loss) {
  const auto& shape = io.in_shape(0, "image_features");
  if (shape.size() != 2) return kforge::Error(kforge::ErrorKind::kHarness, "siglip: shapes");
  const int64_t b = shape[0], d = shape[1];
  const double scale = io.param("logit_scale"), bias = -io.param("neg_bias");
  kforge::OracleParallelFor(io.world, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      auto img = io.in(static_cast<int>(r), "image_features");
      double sum = 0;
      for (int j = 0; j < io.world; ++j) {
        auto txt = io.in(j, "text_features");
        for (int64_t i = 0; i < b; ++i)
          for (int64_t k = 0; k < b; ++k) {
            double dot = 0;
            for (int64_t c = 0; c < d; ++c) dot += img[i * d + c] * txt[k * d + c];
            const double z = scale * dot + bias;
            const bool positive = j == r && i == k;
            sum += Softplus(positive ? -z : z);
          }
      }
      io.out(static_cast<int>(r), "loss")[0] = sum / static_cast<double>(b);
    }
  });
  return kforge::Status::Ok();
}
