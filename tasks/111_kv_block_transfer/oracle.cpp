// Paged KV-cache block transfer from prefill to decode ranks (vLLM P2pNcclConnector,
// NixlConnector): every decode rank's listed blocks become its prefill rank's listed
// blocks; every other block, and every prefill rank's cache, stays as it was.
#include "kforge/oracle.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

// NR distinct block ids of [0, NB) in random order (a fragmented cache), drawn per rank.
KF_INPUT_GENERATOR(kv_block_transfer) {
  if (gen.input_name != "block_ids")
    return kforge::Error(kforge::ErrorKind::kHarness, "kv_block_transfer: unknown custom input");
  const int64_t nb = static_cast<int64_t>(gen.params.at("NB"));
  auto& v = gen.tensor->data;
  const int64_t nr = static_cast<int64_t>(v.size());
  if (nr > nb) return kforge::Error(kforge::ErrorKind::kHarness, "kv_block_transfer: NR > NB");
  std::vector<int64_t> ids(static_cast<size_t>(nb));
  std::iota(ids.begin(), ids.end(), 0);
  // A partial Fisher-Yates shuffle: the first NR entries are a uniform random ordered subset.
  for (int64_t i = 0; i < nr; ++i) {
    const int64_t j = gen.rng->Int(i, nb - 1);
    std::swap(ids[static_cast<size_t>(i)], ids[static_cast<size_t>(j)]);
    v[static_cast<size_t>(i)] = static_cast<double>(ids[static_cast<size_t>(i)]);
  }
  return kforge::Status::Ok();
}

KF_ORACLE(kv_block_transfer) {
  const int w = io.world;
  if (w % 2 != 0) return kforge::Error(kforge::ErrorKind::kHarness, "kv_block_transfer: odd W");
  const auto& shape = io.in_shape(0, "kv_cache");
  if (shape.size() != 5)
    return kforge::Error(kforge::ErrorKind::kHarness, "kv_block_transfer: kv_cache shape");
  const int64_t nb = shape[0];
  const size_t block = static_cast<size_t>(shape[1] * shape[2] * shape[3] * shape[4]);
  for (int r = 0; r < w; ++r) {
    auto in = io.in(r, "kv_cache");
    auto out = io.out(r, "kv_cache");
    std::copy(in.begin(), in.end(), out.begin());
  }
  // Group `pd` is strided with size 2: rank p < W/2 (group rank 0) pairs with p + W/2.
  for (int p = 0; p < w / 2; ++p) {
    const int d = p + w / 2;
    auto src_ids = io.in(p, "block_ids");
    auto dst_ids = io.in(d, "block_ids");
    if (src_ids.size() != dst_ids.size())
      return kforge::Error(kforge::ErrorKind::kHarness, "kv_block_transfer: block_ids sizes");
    auto src = io.in(p, "kv_cache");
    auto dst = io.out(d, "kv_cache");
    for (size_t i = 0; i < src_ids.size(); ++i) {
      const int64_t s = static_cast<int64_t>(src_ids[i]), t = static_cast<int64_t>(dst_ids[i]);
      if (s < 0 || s >= nb || t < 0 || t >= nb)
        return kforge::Error(kforge::ErrorKind::kHarness, "kv_block_transfer: block id range");
      std::copy(src.begin() + s * static_cast<int64_t>(block),
                src.begin() + (s + 1) * static_cast<int64_t>(block),
                dst.begin() + t * static_cast<int64_t>(block));
    }
  }
  return kforge::Status::Ok();
}
