// The fused all-reduce + residual + RMSNorm tasks (102, and 103 with static fp8
// quantisation): their tolerances accept what honest kernels compute and
// refuse lossy transports of the partial sums and a sloppy quantisation, at
// every W, against the exact oracle (check sizes) and against a baseline that
// carries its own rounding (bench sizes).
//
// Honest kernels: the reference (NCCL's bf16 ring, every partial sum rounded,
// then vLLM's fused_add_rms_norm: residual_out = bf16(sum + residual),
// y = bf16(bf16(r * inv) * gamma)) and the fused expert (fp32 sum in rank
// order rounded to bf16, as TensorRT-LLM, then y = bf16(r * inv * gamma)).
// Lossy: the partials through int8 or fp8 with one scale per 128 values,
// summed in fp32. 103's q: round to nearest even of y * (1 / scale); truncation
// and a scale 2.5 % off must fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
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

// e4m3 of v, round to nearest even (saturating), or toward zero.
uint8_t E4M3(double v, bool truncate) {
  uint8_t cell = 0;
  StoreFromDouble(&cell, Dtype::kFp8E4M3, 0, v);
  const double rounded = LoadAsDouble(&cell, Dtype::kFp8E4M3, 0);
  // Magnitudes are monotonic in the low 7 bits: one code down is one step
  // toward zero.
  if (truncate && std::fabs(rounded) > std::fabs(v) && (cell & 0x7f) != 0) --cell;
  return cell;
}

enum class Sum { kRing, kF32, kInt8, kFp8 };

// How one kernel computes the sum over ranks and the norm.
struct Model {
  Sum sum = Sum::kRing;
  int ring_shift = 0;         // where each element's ring starts (the baseline's differs)
  bool vllm_rounding = true;  // y = bf16(bf16(r * inv) * gamma), else bf16(r * inv * gamma)
};

struct Outputs {
  std::vector<uint16_t> y, residual_out;  // bf16 bits
  std::vector<float> y_values;            // y as floats, for the quantisation
};

uint16_t Bits(float v) {
  uint16_t cell = 0;
  StoreFromDouble(&cell, Dtype::kBF16, 0, v);
  return cell;
}

// The sums over ranks of x as the model's transport delivers them.
std::vector<float> Sums(const OracleIo& io, size_t n, const Model& m) {
  const int w = io.world;
  std::vector<float> sums(n, 0.f);
  if (m.sum == Sum::kRing) {
    for (size_t e = 0; e < n; ++e) {
      const int start = static_cast<int>((e + static_cast<size_t>(m.ring_shift)) % w);
      float acc = Bf16(io.in(start, "x")[e]);
      for (int k = 1; k < w; ++k) acc = Bf16(acc + Bf16(io.in((start + k) % w, "x")[e]));
      sums[e] = acc;
    }
    return sums;
  }
  for (int q = 0; q < w; ++q) {
    auto x = io.in(q, "x");
    for (size_t b0 = 0; b0 < n; b0 += 128) {
      const size_t b1 = std::min(b0 + 128, n);
      double amax = 0;
      for (size_t e = b0; e < b1; ++e) amax = std::max(amax, std::abs(x[e]));
      for (size_t e = b0; e < b1; ++e) {
        const double v = m.sum == Sum::kInt8  ? testing::Int8(x[e], amax)
                         : m.sum == Sum::kFp8 ? testing::Fp8E4M3(x[e], amax)
                                              : x[e];
        sums[e] += static_cast<float>(v);
      }
    }
  }
  for (float& v : sums) v = Bf16(v);
  return sums;
}

Outputs Run(const OracleIo& io, int64_t rows, int64_t h, double eps, const Model& m) {
  const size_t n = static_cast<size_t>(rows * h);
  auto residual = io.in(0, "residual");
  auto gamma = io.in(0, "gamma");
  const std::vector<float> sums = Sums(io, n, m);
  Outputs out;
  out.y.resize(n);
  out.residual_out.resize(n);
  out.y_values.resize(n);
  for (int64_t t = 0; t < rows; ++t) {
    const size_t base = static_cast<size_t>(t * h);
    float ss = 0;
    for (int64_t c = 0; c < h; ++c) {
      const float r = Bf16(sums[base + static_cast<size_t>(c)] +
                           static_cast<float>(residual[base + static_cast<size_t>(c)]));
      out.residual_out[base + static_cast<size_t>(c)] = Bits(r);
      ss += r * r;
    }
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(h) + static_cast<float>(eps));
    for (int64_t c = 0; c < h; ++c) {
      const size_t e = base + static_cast<size_t>(c);
      const float r = Bf16(LoadAsDouble(out.residual_out.data(), Dtype::kBF16, e));
      const float g = static_cast<float>(gamma[static_cast<size_t>(c)]);
      const float y = m.vllm_rounding ? Bf16(Bf16(r * inv) * g) : Bf16(r * inv * g);
      out.y[e] = Bits(y);
      out.y_values[e] = y;
    }
  }
  return out;
}

std::vector<double> WidenBf16(const std::vector<uint16_t>& v) {
  std::vector<double> out(v.size());
  for (size_t j = 0; j < v.size(); ++j) out[j] = LoadAsDouble(v.data(), Dtype::kBF16, j);
  return out;
}

const ConcreteTensor& OutputNamed(const Problem& p, const std::string& name) {
  for (const ConcreteTensor& t : p.outputs) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << "no output " << name;
  return p.outputs[0];
}

// The bf16 outputs (102's y and residual_out, 103's residual_out) at one W.
void CheckBf16Outputs(const Problem& p, const OracleIo& io, const std::vector<std::string>& names) {
  const int w = io.world;
  const auto rows = static_cast<int64_t>(p.vars.at("T"));
  const auto h = static_cast<int64_t>(p.vars.at("H"));
  const double eps = p.vars.at("eps");
  const Outputs ref = Run(io, rows, h, eps, {});
  const Outputs fused = Run(io, rows, h, eps, {.sum = Sum::kF32, .vllm_rounding = false});
  const Outputs int8 = Run(io, rows, h, eps, {.sum = Sum::kInt8, .vllm_rounding = false});
  const Outputs fp8 = Run(io, rows, h, eps, {.sum = Sum::kFp8, .vllm_rounding = false});
  const Outputs baseline = Run(io, rows, h, eps, {.ring_shift = 1});
  CompareContext ctx;
  ctx.world = w;
  for (const std::string& name : names) {
    const ConcreteTensor& out = OutputNamed(p, name);
    ASSERT_GE(out.numel, kRmsMinElements);
    int index = 0;
    while (p.outputs[static_cast<size_t>(index)].name != name) ++index;
    const std::vector<double>& exact = io.outputs[0][static_cast<size_t>(index)].data;
    auto pick = [&](const Outputs& o) { return name == "y" ? o.y : o.residual_out; };
    const CompareReport ref_rep = CompareOutput(out, pick(ref).data(), exact, ctx);
    const CompareReport fused_rep = CompareOutput(out, pick(fused).data(), exact, ctx);
    const CompareReport i8_rep = CompareOutput(out, pick(int8).data(), exact, ctx);
    const CompareReport f8_rep = CompareOutput(out, pick(fp8).data(), exact, ctx);
    EXPECT_TRUE(ref_rep.passed) << p.task_name << " " << name << " W=" << w << " reference: rms "
                                << ref_rep.rms_rel_err << ", " << ref_rep.bad_count << " bad";
    EXPECT_LT(ref_rep.rms_rel_err, out.tolerance.rms / 1.15) << name << " W=" << w << ": margin";
    EXPECT_TRUE(fused_rep.passed) << p.task_name << " " << name << " W=" << w << " fused";
    EXPECT_FALSE(i8_rep.passed) << p.task_name << " " << name << " W=" << w << " int8: rms "
                                << i8_rep.rms_rel_err << ", allowed " << out.tolerance.rms;
    EXPECT_FALSE(f8_rep.passed) << p.task_name << " " << name << " W=" << w << " fp8";
    ConcreteTensor vs = out;
    vs.tolerance = AgainstBaseline(out.tolerance);
    const std::vector<double> base = WidenBf16(pick(baseline));
    const CompareReport ref_vs = CompareOutput(vs, pick(ref).data(), base, ctx);
    const CompareReport fused_vs = CompareOutput(vs, pick(fused).data(), base, ctx);
    const CompareReport i8_vs = CompareOutput(vs, pick(int8).data(), base, ctx);
    EXPECT_TRUE(ref_vs.passed) << p.task_name << " " << name << " W=" << w
                               << " reference against the baseline: rms " << ref_vs.rms_rel_err;
    EXPECT_TRUE(fused_vs.passed) << p.task_name << " " << name << " W=" << w
                                 << " fused against the baseline: rms " << fused_vs.rms_rel_err;
    EXPECT_FALSE(i8_vs.passed) << p.task_name << " " << name << " W=" << w
                               << " int8 against the baseline: rms " << i8_vs.rms_rel_err
                               << ", allowed " << vs.tolerance.rms;
    std::printf(
        "%s %s W=%d (n %lld, rms bound %.5f): rms rel reference %.5f fused %.5f int8 %.5f fp8 "
        "%.5f; against the baseline (bound %.5f): reference %.5f fused %.5f int8 %.5f\n",
        p.task_name.c_str(), name.c_str(), w, static_cast<long long>(out.numel), out.tolerance.rms,
        ref_rep.rms_rel_err, fused_rep.rms_rel_err, i8_rep.rms_rel_err, f8_rep.rms_rel_err,
        vs.tolerance.rms, ref_vs.rms_rel_err, fused_vs.rms_rel_err, i8_vs.rms_rel_err);
  }
}

Result<Problem> Problem102Or103(const std::string& key, int w, Task& task) {
  Result<Task> t = LoadTask(std::filesystem::path(KFORGE_TEST_TASKS_DIR) / key);
  if (!t.ok()) return t.status();
  task = *t;
  for (const SizeSpec& s : task.check_sizes) {
    if (s.label == "llama_row") return Instantiate(task, w, Dtype::kBF16, s, true);
  }
  return Error(ErrorKind::kInvalidInput, key + " has no llama_row check size");
}

TEST(DecodeFusionTasks, ResidualRmsNormTolerancesAcceptHonestKernelsAndRefuseLossyTransport) {
  for (const char* key : {"102_allreduce_residual_rmsnorm", "103_allreduce_residual_rmsnorm_fp8"}) {
    for (int w : {2, 4, 8}) {
      Task task;
      Result<Problem> p = Problem102Or103(key, w, task);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      Result<OracleIo> io = BuildOracleIo(*p, 5150 + w, {});
      ASSERT_TRUE(io.ok());
      ASSERT_TRUE(RunOracle(*p, *io).ok());
      if (std::string(key).rfind("102", 0) == 0)
        CheckBf16Outputs(*p, *io, {"y", "residual_out"});
      else
        CheckBf16Outputs(*p, *io, {"residual_out"});
    }
  }
}

struct Quantiser {
  int ring_shift = 0;     // where each element's ring starts (the baseline's differs)
  bool truncate = false;  // round toward zero instead of to nearest
  float scale_error = 1;  // multiplies 1 / scale
};

// q of one rank as a kernel computes it: the sum as NCCL's ring (every partial
// rounded to bf16), residual_out = bf16(sum + residual), fp32 mean of squares,
// y = bf16(bf16(r * inv) * gamma), q = e4m3(y * (1 / scale)).
std::vector<uint8_t> Quantise(const OracleIo& io, int64_t rows, int64_t h, double eps,
                              const Quantiser& how) {
  const int w = io.world;
  auto residual = io.in(0, "residual");
  auto gamma = io.in(0, "gamma");
  const float inv_s = 1.0f / static_cast<float>(io.in(0, "scale")[0]) * how.scale_error;
  std::vector<uint8_t> q(static_cast<size_t>(rows * h));
  std::vector<float> r(static_cast<size_t>(h));
  for (int64_t t = 0; t < rows; ++t) {
    float ss = 0;
    for (int64_t c = 0; c < h; ++c) {
      const size_t e = static_cast<size_t>(t * h + c);
      const int start = static_cast<int>((e + static_cast<size_t>(how.ring_shift)) % w);
      float acc = Bf16(io.in(start, "x")[e]);
      for (int k = 1; k < w; ++k) acc = Bf16(acc + Bf16(io.in((start + k) % w, "x")[e]));
      r[static_cast<size_t>(c)] = Bf16(acc + static_cast<float>(residual[e]));
      ss += r[static_cast<size_t>(c)] * r[static_cast<size_t>(c)];
    }
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(h) + static_cast<float>(eps));
    for (int64_t c = 0; c < h; ++c) {
      const float y = Bf16(Bf16(r[static_cast<size_t>(c)] * inv) *
                           static_cast<float>(gamma[static_cast<size_t>(c)]));
      q[static_cast<size_t>(t * h + c)] = E4M3(static_cast<double>(y * inv_s), how.truncate);
    }
  }
  return q;
}

std::vector<double> Widen(const std::vector<uint8_t>& q) {
  std::vector<double> out(q.size());
  for (size_t j = 0; j < q.size(); ++j) out[j] = LoadAsDouble(q.data(), Dtype::kFp8E4M3, j);
  return out;
}

TEST(DecodeFusionTasks, Fp8OutputToleranceAcceptsRoundingAndRefusesTruncation) {
  Result<Task> t =
      LoadTask(std::filesystem::path(KFORGE_TEST_TASKS_DIR) / "103_allreduce_residual_rmsnorm_fp8");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const SizeSpec* size = nullptr;
  for (const SizeSpec& s : t->check_sizes) {
    if (s.label == "llama_row") size = &s;
  }
  ASSERT_NE(size, nullptr);
  for (int w : {2, 4, 8}) {
    Result<Problem> p = Instantiate(*t, w, Dtype::kBF16, *size, true);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    Result<OracleIo> io = BuildOracleIo(*p, 9100 + w, {});
    ASSERT_TRUE(io.ok());
    ASSERT_TRUE(RunOracle(*p, *io).ok());
    const ConcreteTensor& q = p->outputs[0];
    ASSERT_EQ(q.name, "q");
    ASSERT_GE(q.numel, kRmsMinElements);
    const auto rows = static_cast<int64_t>(p->vars.at("T"));
    const auto h = static_cast<int64_t>(p->vars.at("H"));
    const double eps = p->vars.at("eps");
    const std::vector<double>& exact = io->outputs[0][0].data;
    CompareContext ctx;
    ctx.world = w;
    const auto honest = Quantise(*io, rows, h, eps, {});
    const auto truncated = Quantise(*io, rows, h, eps, {.truncate = true});
    const auto off_scale = Quantise(*io, rows, h, eps, {.scale_error = 1.025f});
    const CompareReport honest_rep = CompareOutput(q, honest.data(), exact, ctx);
    const CompareReport trunc_rep = CompareOutput(q, truncated.data(), exact, ctx);
    const CompareReport scale_rep = CompareOutput(q, off_scale.data(), exact, ctx);
    EXPECT_TRUE(honest_rep.passed) << "W=" << w << ": rms " << honest_rep.rms_rel_err << ", "
                                   << honest_rep.bad_count << " bad";
    EXPECT_LT(honest_rep.rms_rel_err, q.tolerance.rms / 1.2) << "W=" << w << ": margin";
    EXPECT_FALSE(trunc_rep.passed) << "W=" << w << ": truncation, rms " << trunc_rep.rms_rel_err;
    EXPECT_FALSE(scale_rep.passed)
        << "W=" << w << ": scale 2.5 % off, rms " << scale_rep.rms_rel_err;
    // Bench sizes: against a baseline whose ring starts elsewhere.
    ConcreteTensor vs = q;
    vs.tolerance = AgainstBaseline(q.tolerance);
    const std::vector<double> baseline = Widen(Quantise(*io, rows, h, eps, {.ring_shift = 1}));
    const CompareReport honest_vs = CompareOutput(vs, honest.data(), baseline, ctx);
    EXPECT_TRUE(honest_vs.passed) << "W=" << w << " against the baseline: rms "
                                  << honest_vs.rms_rel_err << ", " << honest_vs.bad_count << " bad";
    std::printf(
        "103 W=%d (n %lld, rms bound %.4f): rms rel honest %.4f truncated %.4f scale+2.5%% %.4f; "
        "against a ring elsewhere %.4f\n",
        w, static_cast<long long>(q.numel), q.tolerance.rms, honest_rep.rms_rel_err,
        trunc_rep.rms_rel_err, scale_rep.rms_rel_err, honest_vs.rms_rel_err);
  }
}

}  // namespace
}  // namespace kforge::eval
