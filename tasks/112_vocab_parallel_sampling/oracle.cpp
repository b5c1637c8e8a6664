// Top-k / top-p sampling over vocabulary-sharded logits (vLLM Sampler with a TP-sharded
// lm_head), in fp64. The row order is total (equal logits by increasing token id), and
// the top-p and inverse-CDF tests follow the task's exact rule, so the token is exact.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace {

constexpr int64_t kMaxTopK = 64;

// The per-row parameters are the same on every rank (replicated: drawn once, for rank 0).
kforge::Status Generate(kforge::GeneratorIo& gen) {
  auto& v = gen.tensor->data;
  kforge::OracleRng& rng = *gen.rng;
  for (double& x : v) {
    if (gen.input_name == "temperature") {
      x = rng.Uniform() < 0.125 ? 0.0 : 0.25 + 1.25 * rng.Uniform();
    } else if (gen.input_name == "top_k") {
      x = static_cast<double>(rng.Int(1, kMaxTopK));
    } else if (gen.input_name == "top_p") {
      x = rng.Uniform() < 0.25 ? 1.0 : 0.3 + 0.7 * rng.Uniform();
    } else if (gen.input_name == "u") {
      // A multiple of 2^-24: exact in f32 and below 1 (a rounded-up 1 would sample nothing).
      x = std::floor(rng.Uniform() * 16777216.0) / 16777216.0;
    } else {
      return kforge::Error(kforge::ErrorKind::kHarness, "vocab_parallel_sampling: custom input");
    }
  }
  return kforge::Status::Ok();
}

}  // namespace

KF_INPUT_GENERATOR(vocab_parallel_sampling) { return Generate(gen); }

KF_ORACLE(vocab_parallel_sampling) {
  const int w = io.world;
  const auto& shape = io.in_shape(0, "logits");
  if (shape.size() != 2)
    return kforge::Error(kforge::ErrorKind::kHarness, "vocab_parallel_sampling: logits shape");
  const int64_t rows = shape[0], vl = shape[1], v = vl * w;
  auto temperature = io.in(0, "temperature");
  auto top_k = io.in(0, "top_k");
  auto top_p = io.in(0, "top_p");
  auto u = io.in(0, "u");
  std::vector<double> token(static_cast<size_t>(rows));
  std::vector<double> z(static_cast<size_t>(v));
  std::vector<int64_t> order(static_cast<size_t>(v));
  for (int64_t b = 0; b < rows; ++b) {
    for (int r = 0; r < w; ++r) {
      auto l = io.in(r, "logits");
      std::copy(l.begin() + b * vl, l.begin() + (b + 1) * vl, z.begin() + r * vl);
    }
    const size_t bi = static_cast<size_t>(b);
    const int64_t k = std::min(static_cast<int64_t>(top_k[bi]), v);
    if (k < 1 || top_k[bi] > kMaxTopK || !(top_p[bi] > 0 && top_p[bi] <= 1) ||
        temperature[bi] < 0 || !(u[bi] >= 0 && u[bi] < 1))
      return kforge::Error(kforge::ErrorKind::kHarness, "vocab_parallel_sampling: params");
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t c) {
      const double za = z[static_cast<size_t>(a)], zc = z[static_cast<size_t>(c)];
      return za > zc || (za == zc && a < c);
    });
    if (temperature[bi] == 0) {
      token[bi] = static_cast<double>(order[0]);
      continue;
    }
    std::vector<double> cum(static_cast<size_t>(k));
    const double z1 = z[static_cast<size_t>(order[0])];
    double s = 0;
    for (int64_t j = 0; j < k; ++j) {
      s += std::exp((z[static_cast<size_t>(order[static_cast<size_t>(j)])] - z1) / temperature[bi]);
      cum[static_cast<size_t>(j)] = s;
    }
    int64_t n = 0;  // 0-based: the kept prefix is 0..n
    while (cum[static_cast<size_t>(n)] < top_p[bi] * cum[static_cast<size_t>(k - 1)]) ++n;
    int64_t m = 0;
    while (!(cum[static_cast<size_t>(m)] > u[bi] * cum[static_cast<size_t>(n)])) ++m;
    token[bi] = static_cast<double>(order[static_cast<size_t>(m)]);
  }
  for (int r = 0; r < w; ++r) {
    auto out = io.out(r, "token");
    std::copy(token.begin(), token.end(), out.begin());
  }
  return kforge::Status::Ok();
}
