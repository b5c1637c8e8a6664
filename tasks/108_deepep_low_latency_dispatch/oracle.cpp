// DeepEP low-latency dispatch: every (token, expert) pair becomes a row on the
// expert's rank, quantized per 128 channels to fp8 e4m3 with DeepEP's fp32
// arithmetic (amax floored at 1e-4, scale 448 / amax, scale_inv amax * (1/448)),
// grouped by local expert, then source rank, then token. The generator makes
// tokens with some all-zero groups and some large ones, and routes k distinct
// experts per token: with probability hot_pct / 100 experts 0..k-1, else uniform over E.
#include "kforge/oracle.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

namespace {

int64_t Var(const std::map<std::string, double>& vars, const char* name) {
  return static_cast<int64_t>(vars.at(name));
}

}  // namespace

KF_INPUT_GENERATOR(deepep_low_latency_dispatch) {
  const int64_t t_count = Var(gen.params, "T"), k = Var(gen.params, "k"), e = Var(gen.params, "E");
  auto& v = gen.tensor->data;
  if (gen.input_name == "x") {
    const int64_t groups = Var(gen.params, "HB");
    if (static_cast<int64_t>(v.size()) != t_count * groups * 128)
      return kforge::Error(kforge::ErrorKind::kHarness,
                           "deepep_low_latency_dispatch: x is not T*H");
    for (int64_t t = 0; t < t_count; ++t) {
      const double big = gen.rng->Uniform() < 0.1 ? 5.0 : 1.0;
      for (int64_t g = 0; g < groups; ++g) {
        const bool zero = gen.rng->Uniform() < 0.02;
        for (int64_t c = 0; c < 128; ++c)
          v[static_cast<size_t>((t * groups + g) * 128 + c)] = zero ? 0.0 : big * gen.rng->Normal();
      }
    }
    return kforge::Status::Ok();
  }
  const double hot = gen.params.at("hot_pct") / 100.0;
  if (static_cast<int64_t>(v.size()) != t_count * k || k > e)
    return kforge::Error(kforge::ErrorKind::kHarness,
                         "deepep_low_latency_dispatch: topk_idx is not T*k");
  std::vector<int64_t> pool(static_cast<size_t>(e));
  for (int64_t t = 0; t < t_count; ++t) {
    const int64_t n = gen.rng->Uniform() < hot ? k : e;
    for (int64_t i = 0; i < n; ++i) pool[static_cast<size_t>(i)] = i;
    for (int64_t s = 0; s < k; ++s) {
      const int64_t j = gen.rng->Int(s, n - 1);
      std::swap(pool[static_cast<size_t>(s)], pool[static_cast<size_t>(j)]);
      v[static_cast<size_t>(t * k + s)] = static_cast<double>(pool[static_cast<size_t>(s)]);
    }
  }
  return kforge::Status::Ok();
}

KF_ORACLE(deepep_low_latency_dispatch) {
  const int w = io.world;
  const int64_t t_count = static_cast<int64_t>(io.param("T")),
                groups = static_cast<int64_t>(io.param("HB"));
  const int64_t k = static_cast<int64_t>(io.param("k")), e = static_cast<int64_t>(io.param("E"));
  const int64_t h = groups * 128, l_count = e / w;
  // Every rank's quantized tokens, in DeepEP's fp32 arithmetic.
  std::vector<std::vector<double>> q(static_cast<size_t>(w)), s(static_cast<size_t>(w));
  for (int p = 0; p < w; ++p) {
    auto x = io.in(p, "x");
    q[static_cast<size_t>(p)].resize(static_cast<size_t>(t_count * h));
    s[static_cast<size_t>(p)].resize(static_cast<size_t>(t_count * groups));
    for (int64_t t = 0; t < t_count; ++t) {
      for (int64_t g = 0; g < groups; ++g) {
        const size_t base = static_cast<size_t>(t * h + g * 128);
        float amax = 1e-4f;
        for (int64_t c = 0; c < 128; ++c)
          amax = std::fmax(amax, std::fabs(static_cast<float>(x[base + c])));
        const float scale = 448.0f / amax;
        const float inv = 1.0f / 448.0f;
        s[static_cast<size_t>(p)][static_cast<size_t>(t * groups + g)] =
            static_cast<double>(amax * inv);
        for (int64_t c = 0; c < 128; ++c) {
          const float v = static_cast<float>(x[base + c]) * scale;
          q[static_cast<size_t>(p)][base + c] = kforge::om::RoundToE4M3(static_cast<double>(v));
        }
      }
    }
  }
  for (int r = 0; r < w; ++r) {
    auto recv_x = io.out(r, "recv_x");
    auto recv_s = io.out(r, "recv_x_scales");
    auto recv_src = io.out(r, "recv_src_info");
    auto count = io.out(r, "recv_count");
    auto range = io.out(r, "recv_layout_range");
    int64_t row = 0;
    for (int64_t l = 0; l < l_count; ++l) {
      const int64_t block = row;
      for (int p = 0; p < w; ++p) {
        auto idx = io.in(p, "topk_idx");
        const int64_t first = row;
        for (int64_t t = 0; t < t_count; ++t) {
          bool hit = false;
          for (int64_t sl = 0; sl < k; ++sl)
            hit = hit ||
                  static_cast<int64_t>(idx[static_cast<size_t>(t * k + sl)]) == r * l_count + l;
          if (!hit) continue;
          if (row >= static_cast<int64_t>(recv_src.size()))
            return kforge::Error(kforge::ErrorKind::kHarness,
                                 "deepep_low_latency_dispatch: capacity");
          for (int64_t c = 0; c < h; ++c)
            recv_x[static_cast<size_t>(row * h + c)] =
                q[static_cast<size_t>(p)][static_cast<size_t>(t * h + c)];
          for (int64_t g = 0; g < groups; ++g)
            recv_s[static_cast<size_t>(row * groups + g)] =
                s[static_cast<size_t>(p)][static_cast<size_t>(t * groups + g)];
          recv_src[static_cast<size_t>(row)] = static_cast<double>(t);
          ++row;
        }
        range[static_cast<size_t>(l * w + p)] =
            static_cast<double>(first - block) * 4294967296.0 + static_cast<double>(row - first);
      }
      count[static_cast<size_t>(l)] = static_cast<double>(row - block);
    }
    io.out(r, "num_recv")[0] = static_cast<double>(row);
  }
  return kforge::Status::Ok();
}
