// Vocabulary-parallel log-probabilities of target tokens under top-k / top-p
// filtering, processed in chunks of tokens (NeMo-RL
// ChunkedDistributedLogprobWithSampling.forward), in fp64. The chunks change
// only how the work is scheduled: every token's answer is task 082's, from its
// global row (the ranks' vocabulary shards side by side), the same on every rank.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(vocab_parallel_log_prob_topk_chunked) {
  const int w = io.world;
  const auto& shape = io.in_shape(0, "logits");
  if (shape.size() != 3)
    return kforge::Error(kforge::ErrorKind::kHarness,
                         "vocab_parallel_log_prob_topk_chunked: logits shape");
  const int64_t rows = shape[0] * shape[1], vl = shape[2], v = vl * w;
  const int64_t top_k = static_cast<int64_t>(io.param("top_k"));
  const double top_p = io.param("top_p");
  const int64_t chunk_tokens = shape[0] * static_cast<int64_t>(io.param("chunk"));
  if (top_k < 1 || !(top_p > 0 && top_p <= 1) || rows % w != 0 || chunk_tokens < 1 ||
      chunk_tokens % w != 0)
    return kforge::Error(kforge::ErrorKind::kHarness,
                         "vocab_parallel_log_prob_topk_chunked: params");
  auto target = io.in(0, "target");
  std::vector<double> lp(static_cast<size_t>(rows));
  std::vector<double> z(static_cast<size_t>(v));
  for (int64_t n = 0; n < rows; ++n) {
    for (int r = 0; r < w; ++r) {
      auto l = io.in(r, "logits");
      std::copy(l.begin() + n * vl, l.begin() + (n + 1) * vl, z.begin() + r * vl);
    }
    const int64_t t = static_cast<int64_t>(target[static_cast<size_t>(n)]);
    if (t < 0 || t >= v)
      return kforge::Error(kforge::ErrorKind::kHarness,
                           "vocab_parallel_log_prob_topk_chunked: target");
    const kforge::om::FilteredRow st = kforge::om::TopKTopPFilter(z, t, top_k, top_p);
    lp[static_cast<size_t>(n)] = z[static_cast<size_t>(t)] - st.m - st.log_z;
  }
  for (int r = 0; r < w; ++r) {
    auto out = io.out(r, "logprobs");
    if (static_cast<int64_t>(out.size()) != rows)
      return kforge::Error(kforge::ErrorKind::kHarness,
                           "vocab_parallel_log_prob_topk_chunked: output");
    std::copy(lp.begin(), lp.end(), out.begin());
  }
  return kforge::Status::Ok();
}
