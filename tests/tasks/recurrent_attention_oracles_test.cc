// The recurrent context-parallel attention oracles (tasks 074, 075) on tiny hand-computed inputs,
// called through the registry so that each task's KF_ORACLE registration is tested too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kforge/oracle.h"
#include "oracle_io.h"

namespace kforge {
namespace {

using oracle_test::MakeIo;
using oracle_test::Out;
using oracle_test::RunOracle;
using oracle_test::Tensor;

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "element " << i;
}

// W = 2, one position per rank, one head per rank (H = 2), DK = DV = 1, so qn and kn are the
// signs of q and k. gate = dt_bias = 0 makes softplus ln 2 and the decay 2^-exp(a_log): 1/2 for
// head 0 (a_log 0), 1/4 for head 1 (a_log ln 2).
//   head 0: t0 q 2, k -3, v 0.5, beta 0.5: u = 0.25, M = -0.25, o = -0.25
//           t1 q -1, k 2, v 1, beta 1:     M = -0.125, u = 1.125, M = 1, o = -1
//   head 1: t0 q 1, k 1, v 2, beta 1:      u = 2, M = 2, o = 2
//           t1 q 1, k -1, v 0, beta 0.5:   M = 0.5, u = 0.25, M = 0.25, o = 0.25
TEST(RecurrentAttentionOracles, GatedDeltaNetRunsEachHeadOverTheWholeSequence) {
  OracleIo io = MakeIo(2,
                       {
                           {"q", {1, 2, 1}, {{2, 1}, {-1, 1}}},
                           {"k", {1, 2, 1}, {{-3, 1}, {2, -1}}},
                           {"v", {1, 2, 1}, {{0.5, 2}, {1, 0}}},
                           {"gate", {1, 2}, {{0, 0}, {0, 0}}},
                           {"beta", {1, 2}, {{0.5, 1}, {1, 0.5}}},
                           {"a_log", {1}, {{0}, {std::log(2.0)}}},
                           {"dt_bias", {1}, {{0}, {0}}},
                       },
                       {{"o", {1, 2, 1}}}, {});
  RunOracle("fla_gated_deltanet_cp", io);
  ExpectNear(Out(io, 0, "o"), {-0.25, 2});
  ExpectNear(Out(io, 1, "o"), {-1, 0.25});
}

// DK = 2: q = (3, 4) normalises to (0.6, 0.8) and is scaled by 2^-1/2; k = (0, 2) to (0, 1).
// One token from zero state: u = beta v = 1, M = kn u^T = (0, 1)^T, o = 0.8 / sqrt(2).
// dt_bias = 30 takes softplus past its threshold (the identity): decay exp(-30) on the empty
// state changes nothing; rank 1's head sees rank 0's token only through the decayed state.
TEST(RecurrentAttentionOracles, GatedDeltaNetNormalisesQAndKAndScalesQ) {
  OracleIo io = MakeIo(2,
                       {
                           {"q", {1, 2, 2}, {{3, 4, 0, 1}, {0, 1, 0, 1}}},
                           {"k", {1, 2, 2}, {{0, 2, 0, 1}, {0, 1, 0, 1}}},
                           {"v", {1, 2, 1}, {{1, 0}, {0, 0}}},
                           {"gate", {1, 2}, {{0, 0}, {0, 0}}},
                           {"beta", {1, 2}, {{1, 1}, {0, 0}}},
                           {"a_log", {1}, {{0}, {0}}},
                           {"dt_bias", {1}, {{30}, {0}}},
                       },
                       {{"o", {1, 2, 1}}}, {});
  RunOracle("fla_gated_deltanet_cp", io);
  // Head 0 at t1: M = e^-30 (0, 1)^T, beta 0 leaves it, o = qn . M = e^-30 / sqrt(2).
  ExpectNear(Out(io, 0, "o"), {0.8 / std::sqrt(2.0), 0});
  ExpectNear(Out(io, 1, "o"), {std::exp(-30.0) / std::sqrt(2.0), 0});
}

// Task 075's f32 tolerance: an fp32 step-by-step recurrence (state, norms and dot products in
// fp32, the task's init ranges, 256 tokens over 2 ranks) stays well inside atol 1e-5 / sqrt(DK),
// rtol 1e-4 of the fp64 oracle.
TEST(RecurrentAttentionOracles, GatedDeltaNetFp32RecurrenceIsWellInsideTheF32Tolerance) {
  const int world = 2, s = 128, hl = 2, heads = world * hl, dk = 32, dv = 8;
  std::mt19937_64 rng(75);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto bf16 = [](double x) {  // round to bf16's 8 significant bits
    int e = 0;
    const double m = std::frexp(x, &e);
    return std::ldexp(std::nearbyint(m * 256.0) / 256.0, e);
  };
  std::vector<Tensor> in = {{"q", {s, heads, dk}, {}}, {"k", {s, heads, dk}, {}},
                            {"v", {s, heads, dv}, {}}, {"gate", {s, heads}, {}},
                            {"beta", {s, heads}, {}},  {"a_log", {hl}, {}},
                            {"dt_bias", {hl}, {}}};
  for (Tensor& t : in) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    for (int r = 0; r < world; ++r) {
      std::vector<double> x(n);
      for (double& e : x) {
        if (t.name == "beta")
          e = unit(rng);
        else if (t.name == "a_log")
          e = -3.0 + 3.5 * unit(rng);
        else if (t.name == "dt_bias")
          e = -0.1 + 0.2 * unit(rng);
        else
          e = normal(rng);
        e = bf16(e);
      }
      t.per_rank.push_back(x);
    }
  }
  OracleIo io = MakeIo(world, in, {{"o", {s, heads, dv}}}, {});
  RunOracle("fla_gated_deltanet_cp", io);
  double worst = 0;  // max |got - exp| / (atol + rtol |exp|)
  for (int h = 0; h < heads; ++h) {
    const int owner = h / hl;
    const float a = std::exp(static_cast<float>(in[5].per_rank[owner][h % hl]));
    const float dtb = static_cast<float>(in[6].per_rank[owner][h % hl]);
    std::vector<float> m(dk * dv, 0.f);
    for (int t = 0; t < world * s; ++t) {
      const int p = t / s;
      const int64_t row = (t % s) * heads + h;
      const double* q = in[0].per_rank[p].data() + row * dk;
      const double* k = in[1].per_rank[p].data() + row * dk;
      float qq = 0, kk = 0;
      for (int i = 0; i < dk; ++i) {
        qq += static_cast<float>(q[i] * q[i]);
        kk += static_cast<float>(k[i] * k[i]);
      }
      const float qs = 1.f / std::sqrt(static_cast<float>(dk)) / std::max(std::sqrt(qq), 1e-6f);
      const float ks = 1.f / std::max(std::sqrt(kk), 1e-6f);
      const float x = static_cast<float>(in[3].per_rank[p][row]) + dtb;
      const float decay = std::exp(-a * (x > 20.f ? x : std::log1p(std::exp(x))));
      const float beta = static_cast<float>(in[4].per_rank[p][row]);
      for (int j = 0; j < dv; ++j) {
        float proj = 0;
        for (int i = 0; i < dk; ++i) {
          m[i * dv + j] *= decay;
          proj += static_cast<float>(k[i]) * ks * m[i * dv + j];
        }
        const float u = (static_cast<float>(in[2].per_rank[p][row * dv + j]) - proj) * beta;
        float o = 0;
        for (int i = 0; i < dk; ++i) {
          m[i * dv + j] += static_cast<float>(k[i]) * ks * u;
          o += static_cast<float>(q[i]) * qs * m[i * dv + j];
        }
        const double want = io.out(p, "o")[row * dv + j];
        const double bound = 1e-5 / std::sqrt(static_cast<double>(dk)) + 1e-4 * std::fabs(want);
        worst = std::max(worst, std::fabs(o - want) / bound);
      }
    }
  }
  EXPECT_LT(worst, 0.2);
}

// Task 074 at W = 4: TP groups {0,1} {2,3}, CP groups {0,2} {1,3}. H = S = DK = DV = 1, beta raw
// 40 (sigmoid 1 to 1e-17), g = dt_bias = a_log = 0 (decay d = e^-2.5).
//   CP group 0 (ranks 0, 2): t0 q 1, k 1, v 2: M = 2, out 2; t1 q -1, k 1, v 1: M = 2d,
//     u = 1 - 2d, M = 1, out -1.
//   CP group 1 (ranks 1, 3): t0 q 1, k -1, v 3: M = -3, out -3; t1 q 1, k 1, v 0.5: M = -3d,
//     u = 0.5 + 3d, M = 0.5, out 0.5.
// Ranks 0 and 1 (CP position 0) get 2 - 3 = -1, ranks 2 and 3 get -1 + 0.5 = -0.5.
TEST(RecurrentAttentionOracles, KimiDeltaAttentionSumsTheTpPartnersOfEachCpPosition) {
  const std::vector<double> zero = {0};
  OracleIo io = MakeIo(4,
                       {
                           {"q", {1, 1, 1}, {{1}, {1}, {-1}, {1}}},
                           {"k", {1, 1, 1}, {{1}, {-1}, {1}, {1}}},
                           {"v", {1, 1, 1}, {{2}, {3}, {1}, {0.5}}},
                           {"g", {1, 1, 1}, {zero, zero, zero, zero}},
                           {"beta", {1, 1}, {{40}, {40}, {40}, {40}}},
                           {"a_log", {1}, {zero, zero, zero, zero}},
                           {"dt_bias", {1}, {zero, zero, zero, zero}},
                       },
                       {{"o", {1, 1, 1}}}, {});
  RunOracle("fla_kimi_delta_attention_cp_tp", io);
  ExpectNear(Out(io, 0, "o"), {-1});
  ExpectNear(Out(io, 1, "o"), {-1});
  ExpectNear(Out(io, 2, "o"), {-0.5});
  ExpectNear(Out(io, 3, "o"), {-0.5});
}

// Task 074 at W = 2 (no TP), DK = 2: the decay is per key channel, with dt_bias per channel.
// t0 (rank 0): k (1, 0), v 1, beta 1: M = (1, 0)^T, q (1, 0) reads 1 / sqrt(2).
// t1 (rank 1): g (-1, 5) + dt_bias (1, -1) = (0, 4): row 0 decays by exp(-5 sigmoid(0)) =
// e^-2.5; k (0, 1) sees row 1 = 0, v 0: u = 0; q (1, 0) reads e^-2.5 / sqrt(2).
TEST(RecurrentAttentionOracles, KimiDeltaAttentionDecaysEachKeyChannel) {
  OracleIo io = MakeIo(2,
                       {
                           {"q", {1, 1, 2}, {{1, 0}, {1, 0}}},
                           {"k", {1, 1, 2}, {{1, 0}, {0, 1}}},
                           {"v", {1, 1, 1}, {{1}, {0}}},
                           {"g", {1, 1, 2}, {{0, 0}, {-1, 5}}},
                           {"beta", {1, 1}, {{40}, {40}}},
                           {"a_log", {1}, {{0}, {0}}},
                           {"dt_bias", {2}, {{1, -1}, {1, -1}}},
                       },
                       {{"o", {1, 1, 1}}}, {});
  RunOracle("fla_kimi_delta_attention_cp_tp", io);
  ExpectNear(Out(io, 0, "o"), {1 / std::sqrt(2.0)});
  ExpectNear(Out(io, 1, "o"), {std::exp(-2.5) / std::sqrt(2.0)});
}

// Task 074's f32 tolerance at W = 2 (one CP group of 256 tokens, no TP): an fp32 step-by-step
// recurrence stays well inside atol 1e-5 / sqrt(DK), rtol 1e-4 of the fp64 oracle.
TEST(RecurrentAttentionOracles, KimiDeltaAttentionFp32RecurrenceIsWellInsideTheF32Tolerance) {
  const int world = 2, s = 128, heads = 2, dk = 32, dv = 8;
  std::mt19937_64 rng(74);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto bf16 = [](double x) {
    int e = 0;
    const double m = std::frexp(x, &e);
    return std::ldexp(std::nearbyint(m * 256.0) / 256.0, e);
  };
  std::vector<Tensor> in = {{"q", {s, heads, dk}, {}},    {"k", {s, heads, dk}, {}},
                            {"v", {s, heads, dv}, {}},    {"g", {s, heads, dk}, {}},
                            {"beta", {s, heads}, {}},     {"a_log", {heads}, {}},
                            {"dt_bias", {heads * dk}, {}}};
  for (Tensor& t : in) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    std::vector<double> x(n);
    for (int r = 0; r < world; ++r) {
      const bool replicated = t.name == "a_log" || t.name == "dt_bias";
      if (!replicated || r == 0)
        for (double& e : x) {
          if (replicated)
            e = -0.1 + 0.2 * unit(rng);
          else if (t.name == "g")
            e = -2.0 + 2.0 * normal(rng);
          else
            e = normal(rng);
          e = bf16(e);
        }
      t.per_rank.push_back(x);
    }
  }
  OracleIo io = MakeIo(world, in, {{"o", {s, heads, dv}}}, {});
  RunOracle("fla_kimi_delta_attention_cp_tp", io);
  double worst = 0;
  for (int h = 0; h < heads; ++h) {
    const float a = std::exp(static_cast<float>(in[5].per_rank[0][h]));
    std::vector<float> m(dk * dv, 0.f), decay(dk);
    for (int t = 0; t < world * s; ++t) {
      const int p = t / s;
      const int64_t row = (t % s) * heads + h;
      const double* q = in[0].per_rank[p].data() + row * dk;
      const double* k = in[1].per_rank[p].data() + row * dk;
      const double* g = in[3].per_rank[p].data() + row * dk;
      float qq = 0, kk = 0;
      for (int i = 0; i < dk; ++i) {
        qq += static_cast<float>(q[i] * q[i]);
        kk += static_cast<float>(k[i] * k[i]);
        const float x = a * static_cast<float>(g[i] + in[6].per_rank[0][h * dk + i]);
        decay[i] = std::exp(-5.f / (1.f + std::exp(-x)));
      }
      const float qs = 1.f / std::sqrt(static_cast<float>(dk)) / std::sqrt(qq);
      const float ks = 1.f / std::sqrt(kk);
      const float beta = 1.f / (1.f + std::exp(-static_cast<float>(in[4].per_rank[p][row])));
      for (int j = 0; j < dv; ++j) {
        float proj = 0;
        for (int i = 0; i < dk; ++i) {
          m[i * dv + j] *= decay[i];
          proj += static_cast<float>(k[i]) * ks * m[i * dv + j];
        }
        const float u = (static_cast<float>(in[2].per_rank[p][row * dv + j]) - proj) * beta;
        float o = 0;
        for (int i = 0; i < dk; ++i) {
          m[i * dv + j] += static_cast<float>(k[i]) * ks * u;
          o += static_cast<float>(q[i]) * qs * m[i * dv + j];
        }
        const double want = io.out(p, "o")[row * dv + j];
        const double bound = 1e-5 / std::sqrt(static_cast<double>(dk)) + 1e-4 * std::fabs(want);
        worst = std::max(worst, std::fabs(o - want) / bound);
      }
    }
  }
  EXPECT_LT(worst, 0.2);
}

}  // namespace
}  // namespace kforge
