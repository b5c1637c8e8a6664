// The gradient of task 083's log-probabilities with respect to the
// vocabulary-parallel logits (NeMo-RL ChunkedDistributedLogprobWithSampling
// .backward), in fp64: for every token, g * (onehot(target) - p) on the
// filtered support (the kept tokens and the target), 0 elsewhere, where p is
// the softmax over that support; rank r's output is its vocabulary shard.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(vocab_parallel_log_prob_topk_chunked_backward) {
  const int w = io.world;
  const auto& shape = io.in_shape(0, "logits");
  if (shape.size() != 3)
    return kforge::Error(kforge::ErrorKind::kHarness,
                         "vocab_parallel_log_prob_topk_chunked_backward: logits shape");
  const int64_t rows = shape[0] * shape[1], vl = shape[2], v = vl * w;
  const int64_t top_k = static_cast<int64_t>(io.param("top_k"));
  const double top_p = io.param("top_p");
  const int64_t chunk_tokens = shape[0] * static_cast<int64_t>(io.param("chunk"));
  if (top_k < 1 || !(top_p > 0 && top_p <= 1) || rows % w != 0 || chunk_tokens < 1 ||
      chunk_tokens % w != 0)
    return kforge::Error(kforge::ErrorKind::kHarness,
                         "vocab_parallel_log_prob_topk_chunked_backward: params");
  auto target = io.in(0, "target");
  auto grad_output = io.in(0, "grad_output");
  for (int r = 0; r < w; ++r) {
    if (static_cast<int64_t>(io.out(r, "grad_logits").size()) != rows * vl)
      return kforge::Error(kforge::ErrorKind::kHarness,
                           "vocab_parallel_log_prob_topk_chunked_backward: output");
  }
  std::vector<double> z(static_cast<size_t>(v));
  for (int64_t n = 0; n < rows; ++n) {
    for (int r = 0; r < w; ++r) {
      auto l = io.in(r, "logits");
      std::copy(l.begin() + n * vl, l.begin() + (n + 1) * vl, z.begin() + r * vl);
    }
    const int64_t t = static_cast<int64_t>(target[static_cast<size_t>(n)]);
    if (t < 0 || t >= v)
      return kforge::Error(kforge::ErrorKind::kHarness,
                           "vocab_parallel_log_prob_topk_chunked_backward: target");
    const kforge::om::FilteredRow st = kforge::om::TopKTopPFilter(z, t, top_k, top_p);
    const double g = grad_output[static_cast<size_t>(n)];
    for (int r = 0; r < w; ++r) {
      auto out = io.out(r, "grad_logits");
      for (int64_t c = 0; c < vl; ++c) {
        const int64_t col = r * vl + c;
        const double x = z[static_cast<size_t>(col)];
        double d = 0;
        if (x >= st.theta || col == t)
          d = g * ((col == t ? 1.0 : 0.0) - std::exp(x - st.m - st.log_z));
        out[static_cast<size_t>(n * vl + c)] = d;
      }
    }
  }
  return kforge::Status::Ok();
}
