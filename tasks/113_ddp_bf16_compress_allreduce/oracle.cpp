// DDP bucket all-reduce with PyTorch's bf16 compression hook: every rank's bucket
// becomes the exact mean of all ranks' f32 buckets (the bf16 transport's rounding is
// the tolerance's business, not the oracle's).
#include "kforge/oracle.h"

#include <cstddef>
#include <span>
#include <vector>

KF_ORACLE(ddp_bf16_compress_allreduce) {
  const int w = io.world;
  std::vector<std::span<const double>> in;
  std::vector<std::span<double>> out;
  for (int r = 0; r < w; ++r) {
    in.push_back(io.in(r, "grad"));
    out.push_back(io.out(r, "grad"));
  }
  const size_t n = in[0].size();
  for (size_t i = 0; i < n; ++i) {
    double s = 0;
    for (int r = 0; r < w; ++r) s += in[static_cast<size_t>(r)][i];
    const double mean = s / w;
    for (int r = 0; r < w; ++r) out[static_cast<size_t>(r)][i] = mean;
  }
  return kforge::Status::Ok();
}
