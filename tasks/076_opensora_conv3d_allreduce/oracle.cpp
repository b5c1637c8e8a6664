// Tensor-parallel conv3d: every rank's y is the bias plus the sum over ranks of the rank's
// 3x3x3 valid convolution of its input-channel shard, computed directly in fp64.
#include "kforge/oracle.h"

#include <cstdint>
#include <vector>

KF_ORACLE(opensora_conv3d_allreduce) {
  const auto c_out = static_cast<int64_t>(io.param("c_out"));
  const auto frames = static_cast<int64_t>(io.param("frames"));
  const auto height = static_cast<int64_t>(io.param("height"));
  const auto width = static_cast<int64_t>(io.param("width"));
  const int64_t cl = io.in_shape(0, "x")[1];  // channels per rank
  const int64_t hp = height + 2, wp = width + 2, plane = hp * wp, vol = (frames + 2) * plane;
  const int64_t npos = frames * height * width;
  std::vector<double> y(static_cast<size_t>(c_out * npos), 0.0);
  kforge::OracleParallelFor(c_out, [&](int64_t o0, int64_t o1) {
    for (int r = 0; r < io.world; ++r) {
      const auto x = io.in(r, "x");
      const auto w = io.in(r, "w");
      for (int64_t o = o0; o < o1; ++o) {
        double* out = y.data() + o * npos;
        for (int64_t c = 0; c < cl; ++c) {
          for (int64_t tap = 0; tap < 27; ++tap) {
            const double k = w[static_cast<size_t>((o * cl + c) * 27 + tap)];
            const int64_t shift = (tap / 9) * plane + (tap / 3 % 3) * wp + tap % 3;
            const double* in = x.data() + c * vol + shift;
            for (int64_t f = 0; f < frames; ++f)
              for (int64_t h = 0; h < height; ++h) {
                const double* row = in + f * plane + h * wp;
                double* dst = out + (f * height + h) * width;
                for (int64_t v = 0; v < width; ++v) dst[v] += k * row[v];
              }
          }
        }
      }
    }
    const auto b = io.in(0, "b");
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t p = 0; p < npos; ++p) y[static_cast<size_t>(o * npos + p)] += b[o];
  });
  for (int r = 0; r < io.world; ++r) {
    auto out = io.out(r, "y");
    for (size_t i = 0; i < out.size(); ++i) out[i] = y[i];
  }
  return kforge::Status::Ok();
}
