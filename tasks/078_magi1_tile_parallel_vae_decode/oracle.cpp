// Tile-parallel VAE decode: every rank's y is the blended, stitched decode of the one replicated
// latent z, computed per output pixel in fp64 straight from the definition (no tiles are
// materialised: a pixel's tile, its neighbours and their trilinear samples are found from the
// pixel's coordinates).
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

// One latent axis: length n, tiles of length tile every stride, upsampled by up.
struct Axis {
  int64_t n, tile, stride, up;
  int64_t Len(int64_t i) const { return std::min(tile, n - i * stride); }
  // Blend extent between tiles i-1 and i, in output positions.
  int64_t Extent(int64_t i) const {
    return std::min({up * Len(i - 1), up * Len(i), up * (tile - stride)});
  }
};

// Linear interpolation taps of output index o in a tile of len samples (align_corners = False).
struct Taps {
  int64_t i0, i1;
  double w0, w1;
};
Taps TapsOf(int64_t o, int64_t len, int64_t up) {
  const double q = std::max(0.0, (static_cast<double>(o) + 0.5) / static_cast<double>(up) - 0.5);
  Taps t;
  t.i0 = static_cast<int64_t>(std::floor(q));
  t.i1 = t.i0 + (t.i0 < len - 1 ? 1 : 0);
  t.w1 = q - static_cast<double>(t.i0);
  t.w0 = 1.0 - t.w1;
  return t;
}

struct Decoder {
  const double* z;
  int64_t c, zt, zh, zv;
  Axis at, ah, av;
  // Decoded tile (it, ih, iv), output channel k, local output position (ot, oh, ov).
  double At(int64_t it, int64_t ih, int64_t iv, int64_t k, int64_t ot, int64_t oh,
            int64_t ov) const {
    const Taps tt = TapsOf(ot, at.Len(it), at.up);
    const Taps th = TapsOf(oh, ah.Len(ih), ah.up);
    const Taps tv = TapsOf(ov, av.Len(iv), av.up);
    const double* base = z + (k % c) * zt * zh * zv;
    const int64_t t0 = it * at.stride, h0 = ih * ah.stride, v0 = iv * av.stride;
    auto sample = [&](int64_t a, int64_t b, int64_t d) {
      return base[((t0 + a) * zh + h0 + b) * zv + v0 + d];
    };
    auto plane = [&](int64_t a) {
      return th.w0 * (tv.w0 * sample(a, th.i0, tv.i0) + tv.w1 * sample(a, th.i0, tv.i1)) +
             th.w1 * (tv.w0 * sample(a, th.i1, tv.i0) + tv.w1 * sample(a, th.i1, tv.i1));
    };
    return tt.w0 * plane(tt.i0) + tt.w1 * plane(tt.i1);
  }
};

}  // namespace

KF_ORACLE(magi1_tile_parallel_vae_decode) {
  auto p = [&](const char* name) { return static_cast<int64_t>(io.param(name)); };
  Decoder d;
  d.z = io.in(0, "z").data();
  d.c = p("c");
  d.zt = p("t");
  d.zh = p("h");
  d.zv = p("v");
  d.at = {d.zt, p("tile_t"), p("stride_t"), p("up_t")};
  d.ah = {d.zh, p("tile_s"), p("stride_s"), p("up_s")};
  d.av = {d.zv, p("tile_s"), p("stride_s"), p("up_s")};
  const int64_t ot = d.at.up * d.zt, oh = d.ah.up * d.zh, ov = d.av.up * d.zv;
  const int64_t kt = d.at.up * d.at.stride, kh = d.ah.up * d.ah.stride, kv = d.av.up * d.av.stride;
  std::vector<double> y(static_cast<size_t>(3 * ot * oh * ov));
  kforge::OracleParallelFor(3 * ot, [&](int64_t row0, int64_t row1) {
    for (int64_t row = row0; row < row1; ++row) {
      const int64_t k = row / ot, gt = row % ot;
      const int64_t it = gt / kt, pt = gt % kt;
      for (int64_t gh = 0; gh < oh; ++gh) {
        const int64_t ih = gh / kh, ph = gh % kh;
        for (int64_t gv = 0; gv < ov; ++gv) {
          const int64_t iv = gv / kv, pv = gv % kv;
          double val = d.At(it, ih, iv, k, pt, ph, pv);
          if (it > 0 && pt < d.at.Extent(it)) {
            const int64_t e = d.at.Extent(it);
            const double r = static_cast<double>(pt) / static_cast<double>(e);
            val = d.At(it - 1, ih, iv, k, d.at.up * d.at.Len(it - 1) - e + pt, ph, pv) * (1 - r) +
                  val * r;
          }
          if (ih > 0 && ph < d.ah.Extent(ih)) {
            const int64_t e = d.ah.Extent(ih);
            const double r = static_cast<double>(ph) / static_cast<double>(e);
            val = d.At(it, ih - 1, iv, k, pt, d.ah.up * d.ah.Len(ih - 1) - e + ph, pv) * (1 - r) +
                  val * r;
          }
          if (iv > 0 && pv < d.av.Extent(iv)) {
            const int64_t e = d.av.Extent(iv);
            const double r = static_cast<double>(pv) / static_cast<double>(e);
            val = d.At(it, ih, iv - 1, k, pt, ph, d.av.up * d.av.Len(iv - 1) - e + pv) * (1 - r) +
                  val * r;
          }
          y[static_cast<size_t>((row * oh + gh) * ov + gv)] = val;
        }
      }
    }
  });
  for (int r = 0; r < io.world; ++r) {
    auto out = io.out(r, "y");
    for (size_t i = 0; i < out.size(); ++i) out[i] = y[i];
  }
  return kforge::Status::Ok();
}
