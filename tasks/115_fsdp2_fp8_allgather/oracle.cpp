// FSDP2 float8 all-gather with torchao's dynamic per-tensor scales: every weight's amax
// over all ranks' real rows, its scale in fp64 then fp32, and every element quantized
// with an fp32 product and a saturating e4m3 rounding, exactly as the task specifies.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kforge/oracle_math.h"

namespace {

constexpr int kPerLayer = 7;

int64_t Cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// torchtitan's per-layer order: wq, wk, wv, wo, w1, w2, w3 ([out, in]).
void Shape(int k, int64_t h, int64_t kv, int64_t i, int64_t& rows, int64_t& cols) {
  const int64_t r[kPerLayer] = {h, kv, kv, h, i, h, i};
  const int64_t c[kPerLayer] = {h, h, h, h, h, i, h};
  rows = r[k];
  cols = c[k];
}

}  // namespace

KF_INPUT_GENERATOR(fsdp2_fp8_allgather) {
  if (gen.input_name != "tensors")
    return kforge::Error(kforge::ErrorKind::kHarness, "fsdp2_fp8_allgather: custom input");
  const auto var = [&](const char* name) { return static_cast<int64_t>(gen.params.at(name)); };
  const int64_t l = var("L"), h = var("H"), kv = var("KV"), inter = var("I"), w = gen.world;
  auto& v = gen.tensor->data;
  if (static_cast<int64_t>(v.size()) != 4 * kPerLayer * l)
    return kforge::Error(kforge::ErrorKind::kHarness, "fsdp2_fp8_allgather: NT");
  int64_t shard = 0, out = 0;
  size_t t = 0;
  for (int64_t layer = 0; layer < l; ++layer) {
    for (int k = 0; k < kPerLayer; ++k, ++t) {
      int64_t rows = 0, cols = 0;
      Shape(k, h, kv, inter, rows, cols);
      v[4 * t] = static_cast<double>(rows);
      v[4 * t + 1] = static_cast<double>(cols);
      v[4 * t + 2] = static_cast<double>(shard);
      v[4 * t + 3] = static_cast<double>(out);
      shard += Cdiv(rows, w) * cols;
      out += rows * cols;
    }
  }
  return kforge::Status::Ok();
}

KF_ORACLE(fsdp2_fp8_allgather) {
  const int w = io.world;
  auto table = io.in(0, "tensors");
  const size_t nt = table.size() / 4;
  const int64_t s_len = static_cast<int64_t>(io.in(0, "shards").size());
  std::vector<double> fp8(io.out(0, "weights_fp8").size());
  std::vector<double> scales(nt);
  for (size_t t = 0; t < nt; ++t) {
    const int64_t rows = static_cast<int64_t>(table[4 * t]);
    const int64_t cols = static_cast<int64_t>(table[4 * t + 1]);
    const int64_t so = static_cast<int64_t>(table[4 * t + 2]);
    const int64_t oo = static_cast<int64_t>(table[4 * t + 3]);
    const int64_t c = (rows + w - 1) / w;
    if (so + c * cols > s_len || oo + rows * cols > static_cast<int64_t>(fp8.size()))
      return kforge::Error(kforge::ErrorKind::kHarness, "fsdp2_fp8_allgather: table");
    double amax = 0;
    for (int r = 0; r < w; ++r) {
      auto shard = io.in(r, "shards");
      const int64_t real = std::max<int64_t>(0, std::min(rows, (r + 1) * c) - r * c);
      for (int64_t j = 0; j < real * cols; ++j)
        amax = std::max(amax, std::fabs(shard[static_cast<size_t>(so + j)]));
    }
    // torchao clamps the f32 amax to EPS = 1e-12 (an f32 value), divides in fp64, then rounds.
    const float a = std::max(static_cast<float>(amax), static_cast<float>(1e-12));
    const float scale = static_cast<float>(448.0 / static_cast<double>(a));
    scales[t] = scale;
    for (int r = 0; r < w; ++r) {
      auto shard = io.in(r, "shards");
      const int64_t real = std::max<int64_t>(0, std::min(rows, (r + 1) * c) - r * c);
      for (int64_t j = 0; j < real * cols; ++j) {
        const float x = static_cast<float>(shard[static_cast<size_t>(so + j)]);
        fp8[static_cast<size_t>(oo + r * c * cols + j)] =
            kforge::om::RoundToE4M3(static_cast<double>(x * scale));
      }
    }
  }
  for (int r = 0; r < w; ++r) {
    auto out = io.out(r, "weights_fp8");
    std::copy(fp8.begin(), fp8.end(), out.begin());
    auto sc = io.out(r, "scales");
    std::copy(scales.begin(), scales.end(), sc.begin());
  }
  return kforge::Status::Ok();
}
