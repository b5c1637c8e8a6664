// Vocabulary-parallel cross-entropy: the loss of every token over the global
// vocabulary (the ranks' shards side by side), the same on every rank, and each
// rank's logits shifted in place by the token's global max.
#include "kforge/oracle.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(vocab_parallel_cross_entropy) {
  const int w = io.world;
  const auto& shape = io.in_shape(0, "logits");
  if (shape.size() != 3)
    return kforge::Error(kforge::ErrorKind::kHarness, "vocab_parallel_cross_entropy: logits shape");
  const int64_t rows = shape[0] * shape[1], vl = shape[2], v = vl * w;
  std::vector<double> logits(static_cast<size_t>(rows * v));
  for (int r = 0; r < w; ++r) {
    auto l = io.in(r, "logits");
    if (static_cast<int64_t>(l.size()) != rows * vl)
      return kforge::Error(kforge::ErrorKind::kHarness, "vocab_parallel_cross_entropy: shards");
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < vl; ++c) logits[i * v + r * vl + c] = l[i * vl + c];
  }
  std::vector<double> loss(static_cast<size_t>(rows));
  auto target = io.in(0, "target");
  if (static_cast<int64_t>(target.size()) != rows)
    return kforge::Error(kforge::ErrorKind::kHarness, "vocab_parallel_cross_entropy: target");
  if (auto s = kforge::om::CrossEntropy(logits, target, loss, rows, v); !s.ok()) return s;
  for (int r = 0; r < w; ++r) {
    auto out = io.out(r, "loss");
    auto shifted = io.out(r, "logits");
    auto l = io.in(r, "logits");
    if (static_cast<int64_t>(out.size()) != rows || shifted.size() != l.size())
      return kforge::Error(kforge::ErrorKind::kHarness, "vocab_parallel_cross_entropy: outputs");
    std::copy(loss.begin(), loss.end(), out.begin());
    for (int64_t i = 0; i < rows; ++i) {
      const double* row = logits.data() + i * v;
      const double m = *std::max_element(row, row + v);
      for (int64_t c = 0; c < vl; ++c) shifted[i * vl + c] = l[i * vl + c] - m;
    }
  }
  return kforge::Status::Ok();
}
