// Task 113 (DDP bucket all-reduce with PyTorch's bf16 compression hook): its
// tolerance accepts what the hook computes (each rank's f32 gradients rounded to
// bf16, divided by W, summed by NCCL's bf16 ring with every partial rounded) and
// what a better kernel computes (the bf16 values summed in f32, with or without a
// bf16 all-gather of the averaged chunks), and refuses an int8 or fp8
// block-scaled transport, at every W, against the exact oracle (check sizes) and
// against a ring baseline (bench sizes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "kforge/evaluator/dtype.h"
#include "kforge/evaluator/task.h"
#include "task/compare.h"
#include "task/inputs.h"
#include "transport.h"

namespace kforge::eval {
namespace {

float Bf16(double v) {
  uint16_t cell = 0;
  StoreFromDouble(&cell, Dtype::kBF16, 0, v);
  return static_cast<float>(LoadAsDouble(&cell, Dtype::kBF16, 0));
}

using Grads = std::vector<std::vector<double>>;  // [rank][element]

// bucket.to(bf16).div_(W), then the ring starting at rank (j + shift) % W with every partial
// rounded to bf16.
std::vector<float> HookRing(const Grads& x, int shift) {
  const int w = static_cast<int>(x.size());
  std::vector<float> y(x[0].size());
  for (size_t j = 0; j < y.size(); ++j) {
    const int start = static_cast<int>((j + static_cast<size_t>(shift)) % static_cast<size_t>(w));
    float acc = Bf16(Bf16(x[static_cast<size_t>(start)][j]) / w);
    for (int k = 1; k < w; ++k)
      acc = Bf16(acc + Bf16(Bf16(x[static_cast<size_t>((start + k) % w)][j]) / w));
    y[j] = acc;
  }
  return y;
}

// The bf16 values summed in f32 in rank order, then divided by W (the expert's one-shot);
// `gather_bf16`: the mean rounded once more to bf16 (its two-shot's all-gather).
std::vector<float> F32Accumulation(const Grads& x, bool gather_bf16) {
  const int w = static_cast<int>(x.size());
  std::vector<float> y(x[0].size());
  for (size_t j = 0; j < y.size(); ++j) {
    float acc = 0;
    for (int q = 0; q < w; ++q) acc += Bf16(x[static_cast<size_t>(q)][j]);
    acc /= static_cast<float>(w);
    y[j] = gather_bf16 ? Bf16(acc) : acc;
  }
  return y;
}

// Every rank's x / W through `quantise` with one scale per 128 elements, summed in f32.
template <typename Quantise>
std::vector<float> Quantised(const Grads& x, Quantise quantise) {
  const int w = static_cast<int>(x.size());
  std::vector<float> y(x[0].size(), 0.0f);
  for (const std::vector<double>& part : x) {
    for (size_t b0 = 0; b0 < part.size(); b0 += 128) {
      const size_t b1 = std::min(b0 + 128, part.size());
      double amax = 0;
      for (size_t j = b0; j < b1; ++j) amax = std::max(amax, std::abs(part[j] / w));
      for (size_t j = b0; j < b1; ++j)
        y[j] = static_cast<float>(y[j] + static_cast<float>(quantise(part[j] / w, amax)));
    }
  }
  return y;
}

TEST(DdpBf16Transport, ToleranceAcceptsTheHookAndF32AccumulationAndRefusesInt8AndFp8) {
  Result<Task> t =
      LoadTask(std::filesystem::path(KFORGE_TEST_TASKS_DIR) / "113_ddp_bf16_compress_allreduce");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const SizeSpec* size = nullptr;
  for (const SizeSpec& s : t->check_sizes) {
    if (s.label == "odd") size = &s;
  }
  ASSERT_NE(size, nullptr);
  for (int w : {2, 4, 8}) {
    Result<Problem> p = Instantiate(*t, w, Dtype::kF32, *size, true);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    Result<OracleIo> io = BuildOracleIo(*p, 1130 + w, {});
    ASSERT_TRUE(io.ok());
    ASSERT_TRUE(RunOracle(*p, *io).ok());
    int o = -1;
    for (size_t k = 0; k < p->outputs.size(); ++k) {
      if (p->outputs[k].name == "grad") o = static_cast<int>(k);
    }
    ASSERT_GE(o, 0) << "the in-place grad is not among the checked outputs";
    const int r = w - 1;
    const ConcreteTensor& spec = p->outputs[static_cast<size_t>(o)];
    ASSERT_GT(spec.tolerance.rms, 0) << "no rms bound";
    ASSERT_GE(spec.numel, kRmsMinElements);
    const std::vector<double>& exact = io->outputs[r][static_cast<size_t>(o)].data;
    Grads x;
    for (int q = 0; q < w; ++q) x.emplace_back(io->in(q, "grad").begin(), io->in(q, "grad").end());
    CompareContext ctx;
    ctx.world = w;
    ctx.rank = r;
    const auto check = [&](const ConcreteTensor& s, const std::vector<float>& got,
                           std::span<const double> want) {
      return CompareOutput(s, got.data(), want, ctx);
    };
    const std::vector<float> ring = HookRing(x, 0);
    const std::vector<float> oneshot = F32Accumulation(x, false);
    const std::vector<float> twoshot = F32Accumulation(x, true);
    const std::vector<float> int8 = Quantised(x, testing::Int8);
    const std::vector<float> fp8 = Quantised(x, testing::Fp8E4M3);
    const CompareReport ring_rep = check(spec, ring, exact);
    const CompareReport one_rep = check(spec, oneshot, exact);
    const CompareReport two_rep = check(spec, twoshot, exact);
    const CompareReport i8_rep = check(spec, int8, exact);
    const CompareReport f8_rep = check(spec, fp8, exact);
    EXPECT_TRUE(ring_rep.passed) << "W=" << w << " the hook's ring: rms " << ring_rep.rms_rel_err;
    EXPECT_LT(ring_rep.rms_rel_err, spec.tolerance.rms / 1.15) << "W=" << w << ": margin";
    EXPECT_TRUE(one_rep.passed) << "W=" << w << " f32 accumulation";
    EXPECT_TRUE(two_rep.passed) << "W=" << w << " f32 accumulation, bf16 all-gather";
    EXPECT_FALSE(i8_rep.passed) << "W=" << w << " int8: rms " << i8_rep.rms_rel_err;
    EXPECT_FALSE(f8_rep.passed) << "W=" << w << " fp8: rms " << f8_rep.rms_rel_err;
    // Bench sizes: against a baseline ring whose chunks start elsewhere.
    std::vector<double> baseline(exact.size());
    const std::vector<float> other = HookRing(x, 1);
    std::copy(other.begin(), other.end(), baseline.begin());
    ConcreteTensor vs = spec;
    vs.tolerance = AgainstBaseline(spec.tolerance);
    const CompareReport ring_vs = check(vs, ring, baseline);
    const CompareReport one_vs = check(vs, oneshot, baseline);
    const CompareReport two_vs = check(vs, twoshot, baseline);
    const CompareReport i8_vs = check(vs, int8, baseline);
    EXPECT_TRUE(ring_vs.passed) << "W=" << w << " ring against the baseline";
    EXPECT_TRUE(one_vs.passed) << "W=" << w << " f32 accumulation against the baseline";
    EXPECT_TRUE(two_vs.passed) << "W=" << w << " two-shot against the baseline";
    EXPECT_FALSE(i8_vs.passed) << "W=" << w << " int8 against the baseline: rms "
                               << i8_vs.rms_rel_err << ", allowed " << vs.tolerance.rms;
    std::printf(
        "113 W=%d (rms bound %.5f): rms rel ring %.5f f32 %.5f two-shot %.5f int8 %.5f fp8 %.5f; "
        "against a ring: ring %.5f f32 %.5f int8 %.5f (bound %.5f)\n",
        w, spec.tolerance.rms, ring_rep.rms_rel_err, one_rep.rms_rel_err, two_rep.rms_rel_err,
        i8_rep.rms_rel_err, f8_rep.rms_rel_err, ring_vs.rms_rel_err, one_vs.rms_rel_err,
        i8_vs.rms_rel_err, vs.tolerance.rms);
  }
}

}  // namespace
}  // namespace kforge::eval
