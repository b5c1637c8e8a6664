// kforge::om on hand-computed cases (the arithmetic is in the comments) and,
// for the backward passes, against central finite differences of the forward.
#include "kforge/oracle_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "kforge/oracle.h"
#include "vec_test_util.h"

namespace kforge::om {
namespace {

using testing::ExpectNear;
using testing::kInf;
using testing::kNan;
using testing::Vec;

Vec Random(size_t n, uint64_t seed, double scale = 1.0) {
  OracleRng rng(seed);
  Vec v(n);
  for (double& x : v) x = scale * rng.Normal();
  return v;
}

double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// d loss / d v[i] for every i, by central differences.
Vec NumericGrad(Vec& v, const std::function<double()>& loss, double h = 1e-6) {
  Vec g(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double keep = v[i];
    v[i] = keep + h;
    const double up = loss();
    v[i] = keep - h;
    const double down = loss();
    v[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// ---------------------------------------------------------------------------
// Gemm

TEST(OracleMathGemm, TwoByTwo) {
  // [1 2; 3 4] * [5 6; 7 8] = [1*5+2*7, 1*6+2*8; 3*5+4*7, 3*6+4*8] = [19 22; 43 50]
  Vec c(4, -1);
  Gemm(Vec{1, 2, 3, 4}, Vec{5, 6, 7, 8}, c, 2, 2, 2);
  EXPECT_EQ(c, (Vec{19, 22, 43, 50}));
}

TEST(OracleMathGemm, NonSquareShapes) {
  // A [2,3] = [1 2 3; 4 5 6], B [3,2] = [1 0; 0 1; -1 2]
  // row 0: [1-3, 0+2*1... ] = [1*1+2*0+3*-1, 1*0+2*1+3*2] = [-2, 8]
  // row 1: [4-6, 5+12] = [-2, 17]
  Vec c(4);
  Gemm(Vec{1, 2, 3, 4, 5, 6}, Vec{1, 0, 0, 1, -1, 2}, c, 2, 2, 3);
  EXPECT_EQ(c, (Vec{-2, 8, -2, 17}));
}

TEST(OracleMathGemm, Transposes) {
  // op(A) = [1 2 3; 4 5 6] [2,3]; stored transposed it is At [3,2] = [1 4; 2 5; 3 6].
  // op(B) = [1 0; 0 1; -1 2] [3,2]; stored transposed it is Bt [2,3] = [1 0 -1; 0 1 2].
  const Vec a{1, 2, 3, 4, 5, 6}, at{1, 4, 2, 5, 3, 6};
  const Vec b{1, 0, 0, 1, -1, 2}, bt{1, 0, -1, 0, 1, 2};
  const Vec want{-2, 8, -2, 17};
  for (int mode = 0; mode < 4; ++mode) {
    const bool ta = mode & 1, tb = mode & 2;
    Vec c(4);
    Gemm(ta ? at : a, tb ? bt : b, c, 2, 2, 3, ta, tb);
    EXPECT_EQ(c, want) << "trans_a=" << ta << " trans_b=" << tb;
  }
}

TEST(OracleMathGemm, AlphaBeta) {
  // 2 * [19 22; 43 50] + 0.5 * [2 4; 6 8] = [39 46; 89 104]
  Vec c{2, 4, 6, 8};
  Gemm(Vec{1, 2, 3, 4}, Vec{5, 6, 7, 8}, c, 2, 2, 2, false, false, 2.0, 0.5);
  EXPECT_EQ(c, (Vec{39, 46, 89, 104}));
  // beta = 0 does not read C: a NaN there is overwritten, as in BLAS.
  Vec d{kNan, kNan, kNan, kNan};
  Gemm(Vec{1, 2, 3, 4}, Vec{5, 6, 7, 8}, d, 2, 2, 2);
  EXPECT_EQ(d, (Vec{19, 22, 43, 50}));
  // k = 0: C = beta * C.
  Vec e{1, 2};
  Gemm(Vec{}, Vec{}, e, 1, 2, 0, false, false, 1.0, 3.0);
  EXPECT_EQ(e, (Vec{3, 6}));
}

TEST(OracleMathGemm, RandomAgainstDotProducts) {
  // Odd sizes, large enough (8.5 M multiply-adds) to be split over threads; checked
  // against plain dot products.
  const int64_t m = 203, n = 211, k = 199;
  const Vec a = Random(m * k, 1), b = Random(k * n, 2);
  Vec at(m * k), bt(k * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) at[p * m + i] = a[i * k + p];
  for (int64_t p = 0; p < k; ++p)
    for (int64_t j = 0; j < n; ++j) bt[j * k + p] = b[p * n + j];
  Vec want(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) want[i * n + j] += a[i * k + p] * b[p * n + j];
  for (int mode = 0; mode < 4; ++mode) {
    const bool ta = mode & 1, tb = mode & 2;
    Vec c(m * n);
    Gemm(ta ? at : a, tb ? bt : b, c, m, n, k, ta, tb);
    ExpectNear(c, want, 1e-12, ta ? (tb ? "TT" : "TN") : (tb ? "NT" : "NN"));
  }
}

TEST(OracleMathGemmDeathTest, WrongSizeAborts) {
  Vec c(4);
  EXPECT_DEATH(Gemm(Vec{1, 2, 3}, Vec{5, 6, 7, 8}, c, 2, 2, 2),
               "oracle_math: Gemm: a has 3 elements, expected 4");
}

// ---------------------------------------------------------------------------
// Norms

TEST(OracleMathNorm, RmsNormByHand) {
  // Row 0: x = [1 3], eps = 11: mean(x^2) = (1+9)/2 = 5; sqrt(5+11) = 4 -> [0.25 0.75];
  //   times weight [2 -1] -> [0.5 -0.75].
  // Row 1: x = [2 -2]: mean(x^2) = 4; sqrt(4+11) = sqrt(15) -> [2, -2]/sqrt(15) * w.
  Vec y(4);
  RmsNorm(Vec{1, 3, 2, -2}, Vec{2, -1}, y, 2, 2, 11.0);
  const double s15 = std::sqrt(15.0);
  ExpectNear(y, {0.5, -0.75, 4 / s15, 2 / s15}, 1e-15);
  // Empty weight means ones; eps = 0: [3 4] -> rms = sqrt(12.5).
  Vec y1(2);
  RmsNorm(Vec{3, 4}, Vec{}, y1, 1, 2, 0.0);
  ExpectNear(y1, {3 / std::sqrt(12.5), 4 / std::sqrt(12.5)}, 1e-15);
}

TEST(OracleMathNorm, LayerNormByHand) {
  // x = [1 2 3 4]: mean 2.5; biased var = (2.25+0.25+0.25+2.25)/4 = 1.25; eps = 0.75 ->
  // sqrt(2) -> xhat = [-1.5 -0.5 0.5 1.5]/sqrt(2); y = xhat * [1 2 1 2] + [0 0 1 1].
  Vec y(4);
  LayerNorm(Vec{1, 2, 3, 4}, Vec{1, 2, 1, 2}, Vec{0, 0, 1, 1}, y, 1, 4, 0.75);
  const double r = 1 / std::sqrt(2.0);
  ExpectNear(y, {-1.5 * r, -1.0 * r, 0.5 * r + 1, 3.0 * r + 1}, 1e-15);
  // Empty gamma/beta: ones/zeros. x = [5 5 7 7]: mean 6, var 1, eps 0 -> [-1 -1 1 1].
  Vec y1(4);
  LayerNorm(Vec{5, 5, 7, 7}, Vec{}, Vec{}, y1, 1, 4, 0.0);
  ExpectNear(y1, {-1, -1, 1, 1}, 1e-15);
}

TEST(OracleMathNorm, RmsNormBackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 5;
  const double eps = 1e-3;
  Vec x = Random(rows * cols, 10), w = Random(cols, 11), dy = Random(rows * cols, 12);
  auto loss = [&] {
    Vec y(rows * cols);
    RmsNorm(x, w, y, rows, cols, eps);
    return Dot(y, dy);
  };
  Vec dx(rows * cols), dw(cols);
  RmsNormBackward(x, w, dy, dx, dw, rows, cols, eps);
  ExpectNear(dx, NumericGrad(x, loss), 1e-7, "dx");
  ExpectNear(dw, NumericGrad(w, loss), 1e-7, "dweight");
  // Empty weight (ones) and no dweight.
  Vec ones(cols, 1.0), dx1(rows * cols), dx_ones(rows * cols);
  RmsNormBackward(x, Vec{}, dy, dx1, {}, rows, cols, eps);
  RmsNormBackward(x, ones, dy, dx_ones, {}, rows, cols, eps);
  ExpectNear(dx1, dx_ones, 0.0, "empty weight");
}

TEST(OracleMathNorm, LayerNormBackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, cols = 6;
  const double eps = 1e-5;
  Vec x = Random(rows * cols, 20), g = Random(cols, 21), b = Random(cols, 22);
  const Vec dy = Random(rows * cols, 23);
  auto loss = [&] {
    Vec y(rows * cols);
    LayerNorm(x, g, b, y, rows, cols, eps);
    return Dot(y, dy);
  };
  Vec dx(rows * cols), dg(cols), db(cols);
  LayerNormBackward(x, g, dy, dx, dg, db, rows, cols, eps);
  ExpectNear(dx, NumericGrad(x, loss), 1e-7, "dx");
  ExpectNear(dg, NumericGrad(g, loss), 1e-7, "dgamma");
  ExpectNear(db, NumericGrad(b, loss), 1e-7, "dbeta");
  // dbeta is the column sum of dy, by hand: dy = [1 2; 3 4] -> [4 6].
  Vec dx2(4), db2(2);
  LayerNormBackward(Vec{0, 1, 5, 2}, Vec{}, Vec{1, 2, 3, 4}, dx2, {}, db2, 2, 2, 1e-5);
  EXPECT_EQ(db2, (Vec{4, 6}));
}

// ---------------------------------------------------------------------------
// Activations

TEST(OracleMathActivation, KnownValues) {
  // Published values (Hendrycks & Gimpel; torch.nn.functional.gelu).
  EXPECT_NEAR(Gelu(1.0), 0.8411920, 1e-7);
  EXPECT_NEAR(Gelu(2.0), 1.9545977, 1e-7);
  EXPECT_NEAR(Gelu(-1.0), -0.1588080, 1e-7);
  EXPECT_NEAR(GeluExact(1.0), 0.8413447, 1e-7);
  EXPECT_NEAR(GeluExact(2.0), 1.9544997, 1e-7);
  EXPECT_NEAR(GeluExact(-1.0), -0.1586553, 1e-7);
  // silu(1) = 1/(1+e^-1) = 0.7310586; silu(-1) = -1/(1+e) = -0.2689414.
  EXPECT_NEAR(Silu(1.0), 0.7310586, 1e-7);
  EXPECT_NEAR(Silu(-1.0), -0.2689414, 1e-7);
  // All three have slope 1/2 at 0; silu'(1) = s(1 + (1 - s)) = 0.7310586 * 1.2689414.
  EXPECT_DOUBLE_EQ(GeluGrad(0.0), 0.5);
  EXPECT_DOUBLE_EQ(GeluExactGrad(0.0), 0.5);
  EXPECT_DOUBLE_EQ(SiluGrad(0.0), 0.5);
  EXPECT_NEAR(SiluGrad(1.0), 0.9276705, 1e-7);
  // No overflow far out.
  EXPECT_EQ(Silu(-1000.0), 0.0);
  EXPECT_EQ(Silu(1000.0), 1000.0);
  EXPECT_EQ(Activate(Activation::kRelu, -2.0), 0.0);
  EXPECT_EQ(Activate(Activation::kRelu, 3.0), 3.0);
  EXPECT_EQ(ActivateGrad(Activation::kRelu, 0.0), 0.0);
  EXPECT_EQ(Activate(Activation::kIdentity, -2.5), -2.5);
}

TEST(OracleMathActivation, GradsMatchFiniteDifferences) {
  for (Activation act : {Activation::kGelu, Activation::kGeluExact, Activation::kSilu,
                         Activation::kRelu, Activation::kIdentity}) {
    for (double x : {-3.1, -1.2, -0.4, 0.3, 0.9, 2.2, 4.5}) {
      const double h = 1e-6;
      const double fd = (Activate(act, x + h) - Activate(act, x - h)) / (2 * h);
      EXPECT_NEAR(ActivateGrad(act, x), fd, 1e-8)
          << "activation " << static_cast<int>(act) << " at " << x;
    }
  }
}

// ---------------------------------------------------------------------------
// Softmax, log-sum-exp, cross-entropy

TEST(OracleMathSoftmax, ByHandAndStable) {
  // exp([0, ln2, ln3]) = [1 2 3], sum 6 -> [1/6 2/6 3/6]; shifting by 1000 changes nothing
  // (a version without the max shift overflows to inf/inf = NaN here).
  const double l2 = std::log(2.0), l3 = std::log(3.0);
  Vec y(6);
  Softmax(Vec{0, l2, l3, 1000, 1000 + l2, 1000 + l3}, y, 2, 3);
  ExpectNear(y, {1.0 / 6, 2.0 / 6, 3.0 / 6, 1.0 / 6, 2.0 / 6, 3.0 / 6}, 1e-13);
  EXPECT_NEAR(LogSumExp(Vec{0, l2, l3}), std::log(6.0), 1e-15);
  EXPECT_NEAR(LogSumExp(Vec{1000, 1000}), 1000 + l2, 1e-12);
  EXPECT_EQ(LogSumExp(Vec{}), -kInf);
  EXPECT_EQ(LogSumExp(Vec{-kInf, -kInf}), -kInf);
  EXPECT_EQ(LogSumExp(Vec{1, kInf}), kInf);
  EXPECT_TRUE(std::isnan(LogSumExp(Vec{1, kNan})));
}

TEST(OracleMathSoftmax, CrossEntropyByHand) {
  // Rows of logits [0, ln2, ln3] have LogSumExp ln6:
  // target 2 -> ln6 - ln3 = ln2; target 0 -> ln6 - 0 = ln6; ignored (-100) -> 0.
  const double l2 = std::log(2.0), l3 = std::log(3.0);
  const Vec logits{0, l2, l3, 0, l2, l3, 0, l2, l3};
  Vec loss(3, -1);
  ASSERT_TRUE(CrossEntropy(logits, std::vector<int64_t>{2, 0, -100}, loss, 3, 3).ok());
  ExpectNear(loss, {l2, std::log(6.0), 0.0}, 1e-15);
  // Targets as doubles, the way an oracle sees an integer input tensor.
  Vec loss_d(3, -1);
  ASSERT_TRUE(CrossEntropy(logits, Vec{2, 0, -100}, loss_d, 3, 3).ok());
  EXPECT_EQ(loss_d, loss);
  // A custom ignore_index; -100 is then an out-of-range target.
  ASSERT_TRUE(CrossEntropy(logits, std::vector<int64_t>{2, 7, 1}, loss, 3, 3, 7).ok());
  ExpectNear(loss, {l2, 0.0, std::log(6.0) - l2}, 1e-15);
  Status s = CrossEntropy(logits, std::vector<int64_t>{2, 0, -100}, loss, 3, 3, 7);
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(s.message().find("target -100 of row 2"), std::string::npos) << s.message();
  EXPECT_EQ(CrossEntropy(logits, std::vector<int64_t>{3, 0, 0}, loss, 3, 3).kind(),
            ErrorKind::kInvalidInput);
  EXPECT_EQ(CrossEntropy(logits, Vec{1.5, 0, 0}, loss, 3, 3).kind(), ErrorKind::kInvalidInput);
}

TEST(OracleMathSoftmax, CrossEntropyBackward) {
  // softmax = [1/6 2/6 3/6], target 2: (p - onehot) * dloss = [1/6 1/3 -1/2] * 2.
  const double l2 = std::log(2.0), l3 = std::log(3.0);
  Vec dlogits(6, -1);
  ASSERT_TRUE(CrossEntropyBackward(Vec{0, l2, l3, 0, l2, l3}, std::vector<int64_t>{2, -100},
                                   Vec{2, 5}, dlogits, 2, 3)
                  .ok());
  ExpectNear(dlogits, {2.0 / 6, 2.0 / 3, -1.0, 0, 0, 0}, 1e-15);
  // And against finite differences of the forward on random logits.
  const int64_t rows = 4, cols = 7;
  Vec logits = Random(rows * cols, 30, 2.0);
  const std::vector<int64_t> t{3, 0, 6, 2};
  const Vec dloss{0.5, -1.0, 2.0, 0.25};
  auto total = [&] {
    Vec loss(rows);
    EXPECT_TRUE(CrossEntropy(logits, t, loss, rows, cols).ok());
    return Dot(loss, dloss);
  };
  Vec dl(rows * cols);
  ASSERT_TRUE(CrossEntropyBackward(logits, t, dloss, dl, rows, cols).ok());
  ExpectNear(dl, NumericGrad(logits, total), 1e-7);
}

// ---------------------------------------------------------------------------
// MLP

TEST(OracleMathMlp, ForwardByHand) {
  // x = [1 2], w1 = [1 0; 0 -1] -> h = [1, -2].
  // relu: a = [1 0]; w2 = [3 4; 5 6] -> y = [3 4].
  // identity: a = [1 -2] -> y = [3 - 10, 4 - 12] = [-7 -8].
  const Vec x{1, 2}, w1{1, 0, 0, -1}, w2{3, 4, 5, 6};
  Vec h(2), y(2);
  MlpForward(x, w1, w2, h, y, 1, 2, 2, Activation::kRelu);
  EXPECT_EQ(h, (Vec{1, -2}));
  EXPECT_EQ(y, (Vec{3, 4}));
  MlpForward(x, w1, w2, {}, y, 1, 2, 2, Activation::kIdentity);
  EXPECT_EQ(y, (Vec{-7, -8}));
}

TEST(OracleMathMlp, BackwardMatchesFiniteDifferences) {
  const int64_t tokens = 5, d_model = 4, d_ff = 6;
  for (Activation act : {Activation::kGelu, Activation::kGeluExact, Activation::kSilu,
                         Activation::kRelu, Activation::kIdentity}) {
    Vec x = Random(tokens * d_model, 40), w1 = Random(d_model * d_ff, 41, 0.5);
    Vec w2 = Random(d_ff * d_model, 42, 0.5);
    const Vec dy = Random(tokens * d_model, 43);
    auto loss = [&] {
      Vec y(tokens * d_model);
      MlpForward(x, w1, w2, {}, y, tokens, d_model, d_ff, act);
      return Dot(y, dy);
    };
    const MlpGrads g = MlpBackward(x, w1, w2, dy, tokens, d_model, d_ff, act);
    SCOPED_TRACE(static_cast<int>(act));
    ExpectNear(g.dx, NumericGrad(x, loss), 1e-7, "dx");
    ExpectNear(g.dw1, NumericGrad(w1, loss), 1e-7, "dw1");
    ExpectNear(g.dw2, NumericGrad(w2, loss), 1e-7, "dw2");
  }
}

// ---------------------------------------------------------------------------
// Adam

TEST(OracleMathAdam, TwoStepsByHand) {
  // lr 0.1, betas (0.9, 0.999), eps 1e-8, no weight decay; param 1.
  // Step 1, g = 0.5: m = 0.1*0.5 = 0.05; v = 0.001*0.25 = 2.5e-4.
  //   1 - b1 = 0.1, sqrt(1 - b2) = sqrt(1e-3); sqrt(v)/sqrt(1e-3) = sqrt(0.25) = 0.5.
  //   param = 1 - (0.1/0.1) * 0.05 / (0.5 + 1e-8) = 1 - 0.1/(1 + 2e-8) = 0.900000002 (to 1e-17).
  // Step 2, g = -0.25: m = 0.9*0.05 - 0.1*0.25 = 0.02; v = 0.999*2.5e-4 + 0.001*0.0625 =
  //   3.1225e-4. 1 - b1^2 = 0.19, 1 - b2^2 = 0.001999. m/0.19 = 0.1052631579;
  //   sqrt(3.1225e-4 / 0.001999) = sqrt(0.1562031016) = 0.3952253807;
  //   param = 0.900000002 - 0.1 * 0.1052631579 / 0.3952253907 = 0.8733662987.
  Vec p{1}, m{0}, v{0};
  AdamConfig cfg{.lr = 0.1};
  AdamStep(p, Vec{0.5}, m, v, cfg);
  EXPECT_NEAR(p[0], 0.900000002, 1e-15);
  EXPECT_NEAR(m[0], 0.05, 1e-16);
  EXPECT_NEAR(v[0], 2.5e-4, 1e-18);
  cfg.step = 2;
  AdamStep(p, Vec{-0.25}, m, v, cfg);
  EXPECT_NEAR(m[0], 0.02, 1e-16);
  EXPECT_NEAR(v[0], 3.1225e-4, 1e-18);
  EXPECT_NEAR(p[0], 0.8733662987, 1e-10);
}

TEST(OracleMathAdam, WeightDecayCoupledAndDecoupled) {
  // Adam (L2), wd 0.1, lr 0.1, param 1, g 0.5: g' = 0.5 + 0.1*1 = 0.6; m = 0.06,
  //   v = 0.001*0.36 = 3.6e-4; param = 1 - 0.06/(0.6 + 1e-8) = 0.9 + 1e-9/0.6.
  Vec p{1}, m{0}, v{0};
  AdamStep(p, Vec{0.5}, m, v, {.lr = 0.1, .weight_decay = 0.1, .decoupled = false});
  EXPECT_NEAR(m[0], 0.06, 1e-16);
  EXPECT_NEAR(v[0], 3.6e-4, 1e-18);
  EXPECT_NEAR(p[0], 0.9 + 1e-9 / 0.6, 1e-15);
  // AdamW, same numbers: param = 1*(1 - 0.1*0.1) = 0.99, then m, v from g = 0.5 as in
  //   TwoStepsByHand: param = 0.99 - 0.1/(1 + 2e-8) = 0.890000002.
  Vec q{1}, mq{0}, vq{0};
  AdamStep(q, Vec{0.5}, mq, vq, {.lr = 0.1, .weight_decay = 0.1, .decoupled = true});
  EXPECT_NEAR(mq[0], 0.05, 1e-16);
  EXPECT_NEAR(vq[0], 2.5e-4, 1e-18);
  EXPECT_NEAR(q[0], 0.890000002, 1e-15);
}

TEST(OracleMathAdam, EpsIsAddedAfterBiasCorrection) {
  // With eps = 0.5 the placement matters. Step 1, g = 0.5, lr 1, param 0:
  // torch: 0 - 1 * 0.05/0.1 / (0.5 + 0.5) = -0.5.
  // (eps added before dividing by sqrt(1 - b2) would give -0.05/0.1/(0.5 + 15.8) = -0.0307.)
  Vec p{0}, m{0}, v{0};
  AdamStep(p, Vec{0.5}, m, v, {.lr = 1.0, .eps = 0.5});
  EXPECT_NEAR(p[0], -0.5, 1e-15);
}

// Top-k then top-p by value, on rows small enough to work out by hand.
TEST(TopKTopPFilter, KeepsTiesAtTheKthValueAndWholeGroupsUnderTopP) {
  const double l2 = std::log(2.0);
  // exp(z - m) = 1, 1/2, 1/2, 1/4: top_k = 2 keeps both 1/2 (a tie at the k-th
  // value), top-k mass 2; top_p = 0.4 keeps only the first group (above 0 <
  // 0.8, then above 1 >= 0.8).
  const std::vector<double> z = {0.0, -l2, -l2, -2 * l2};
  FilteredRow r = TopKTopPFilter(z, 0, 2, 0.4);
  EXPECT_DOUBLE_EQ(r.m, 0.0);
  EXPECT_DOUBLE_EQ(r.theta, 0.0);
  EXPECT_NEAR(r.log_z, 0.0, 1e-15);  // support {0}
  // top_p = 0.9: the tied pair is kept or dropped together: kept (1 < 1.8).
  r = TopKTopPFilter(z, 0, 2, 0.9);
  EXPECT_DOUBLE_EQ(r.theta, -l2);
  EXPECT_NEAR(r.log_z, std::log(2.0), 1e-15);
  // A target outside the kept set joins the support.
  r = TopKTopPFilter(z, 3, 2, 0.4);
  EXPECT_NEAR(r.log_z, std::log(1.25), 1e-15);
  // top_k past the row keeps everything; top_p = 1 keeps every group.
  r = TopKTopPFilter(z, 3, 50, 1.0);
  EXPECT_DOUBLE_EQ(r.theta, -2 * l2);
  EXPECT_NEAR(r.log_z, std::log(2.25), 1e-15);
}

// ---------------------------------------------------------------------------
// Attention and MergeAttention

// One query q = 1 against keys k = (0, ln 3), values v = (2, 6), head_dim 1:
// scores (0, ln 3), weights (1, 3) / 4, out = (2 + 18) / 4 = 5, lse = ln 4.
TEST(OracleMathAttention, OneQueryTwoKeysByHand) {
  Vec out(1, kNan), lse(1, kNan);
  AttentionDims d{.batch = 1, .q_len = 1, .kv_len = 2, .head_dim = 1};
  Attention(Vec{1}, Vec{0, std::log(3.0)}, Vec{2, 6}, out, lse, d, 1.0);
  EXPECT_NEAR(out[0], 5, 1e-14);
  EXPECT_NEAR(lse[0], std::log(4.0), 1e-14);
  // The scale multiplies the scores: q = 2 at scale 1/2 is the same.
  Attention(Vec{2}, Vec{0, std::log(3.0)}, Vec{2, 6}, out, lse, d, 0.5);
  EXPECT_NEAR(out[0], 5, 1e-14);
  EXPECT_NEAR(lse[0], std::log(4.0), 1e-14);
}

// Causal, two queries q = (1, 1) on the keys above: query 0 sees key 0 only
// (out 2, lse 0), query 1 both (out 5, lse ln 4). With the keys one position
// later (kv_pos0 = 1), query 0 sees none (out 0, lse -inf) and query 1 sees
// key 0 only.
TEST(OracleMathAttention, CausalMaskUsesGlobalPositions) {
  Vec out(2, kNan), lse(2, kNan);
  AttentionDims d{.batch = 1, .q_len = 2, .kv_len = 2, .head_dim = 1, .causal = true};
  const Vec q = {1, 1}, k = {0, std::log(3.0)}, v = {2, 6};
  Attention(q, k, v, out, lse, d, 1.0);
  ExpectNear(out, {2, 5}, 1e-14);
  ExpectNear(lse, {0, std::log(4.0)}, 1e-14);
  d.kv_pos0 = 1;
  Attention(q, k, v, out, lse, d, 1.0);
  EXPECT_EQ(out, (Vec{0, 2}));
  EXPECT_EQ(lse[0], -kInf);
  EXPECT_NEAR(lse[1], 0, 1e-14);
  // Keys before every query (a previous rank's shard): nothing is masked.
  d.q_pos0 = 10;
  Attention(q, k, v, out, lse, d, 1.0);
  ExpectNear(out, {5, 5}, 1e-14);
}

// GQA: two query heads share one kv head. Head 0 has q = 1 (above: out 5,
// lse ln 4); head 1 has q = 2: scores (0, 2 ln 3), weights (1, 9) / 10,
// out = (2 + 54) / 10 = 5.6, lse = ln 10. lse is [B, H, S].
TEST(OracleMathAttention, QueryHeadsShareKvHeads) {
  Vec out(2, kNan), lse(2, kNan);
  AttentionDims d{.batch = 1, .q_len = 1, .kv_len = 2, .q_heads = 2, .kv_heads = 1, .head_dim = 1};
  Attention(Vec{1, 2}, Vec{0, std::log(3.0)}, Vec{2, 6}, out, lse, d, 1.0);
  ExpectNear(out, {5, 5.6}, 1e-14);
  ExpectNear(lse, {std::log(4.0), std::log(10.0)}, 1e-14);
}

// The two halves of the keys above: (out 2, lse 0) and (out 6, lse ln 3)
// merge to lse = ln(1 + 3) = ln 4, out = (1 * 2 + 3 * 6) / 4 = 5. An empty
// side (0, -inf) changes nothing; two empty sides stay (0, -inf).
TEST(OracleMathAttention, MergeByHand) {
  Vec out = {2}, lse = {0};
  MergeAttention(out, lse, Vec{6}, Vec{std::log(3.0)}, 1, 1, 1, 1);
  EXPECT_NEAR(out[0], 5, 1e-14);
  EXPECT_NEAR(lse[0], std::log(4.0), 1e-14);
  Vec empty_out = {0}, empty_lse = {-kInf};
  MergeAttention(empty_out, empty_lse, Vec{6}, Vec{std::log(3.0)}, 1, 1, 1, 1);
  EXPECT_NEAR(empty_out[0], 6, 1e-14);
  EXPECT_NEAR(empty_lse[0], std::log(3.0), 1e-14);
  MergeAttention(out, lse, Vec{0}, Vec{-kInf}, 1, 1, 1, 1);
  EXPECT_NEAR(out[0], 5, 1e-14);
  Vec none_out = {0}, none_lse = {-kInf};
  MergeAttention(none_out, none_lse, Vec{0}, Vec{-kInf}, 1, 1, 1, 1);
  EXPECT_EQ(none_out[0], 0);
  EXPECT_EQ(none_lse[0], -kInf);
}

// What ring attention relies on: causal attention of a query shard over the
// whole sequence equals the merge of its parts over two key shards, the
// later one partly masked, whatever the order of the merge.
TEST(OracleMathAttention, MergingKeyShardsEqualsAttentionOverAllKeys) {
  const int64_t b = 2, sq = 5, sk = 6, hq = 4, hkv = 2, hd = 3;
  const Vec q = Random(b * sq * hq * hd, 1), k = Random(b * 2 * sk * hkv * hd, 2),
            v = Random(b * 2 * sk * hkv * hd, 3);
  // The query shard sits at positions 7..11, the keys at 0..11.
  AttentionDims whole{.batch = b,
                      .q_len = sq,
                      .kv_len = 2 * sk,
                      .q_heads = hq,
                      .kv_heads = hkv,
                      .head_dim = hd,
                      .causal = true,
                      .q_pos0 = 7};
  Vec out(b * sq * hq * hd), lse(b * hq * sq);
  Attention(q, k, v, out, lse, whole, 0.7);
  // Shard s of the keys: positions s*sk .. s*sk + sk - 1, [b, sk, hkv, hd].
  auto shard = [&](const Vec& x, int s) {
    Vec y;
    for (int64_t bi = 0; bi < b; ++bi) {
      const auto* row = x.data() + (bi * 2 * sk + s * sk) * hkv * hd;
      y.insert(y.end(), row, row + sk * hkv * hd);
    }
    return y;
  };
  std::vector<Vec> outs(2, Vec(out.size())), lses(2, Vec(lse.size()));
  for (int s = 0; s < 2; ++s) {
    AttentionDims part = whole;
    part.kv_len = sk;
    part.kv_pos0 = s * sk;
    Attention(q, shard(k, s), shard(v, s), outs[s], lses[s], part, 0.7);
  }
  for (int first = 0; first < 2; ++first) {
    Vec o = outs[first], l = lses[first];
    MergeAttention(o, l, outs[1 - first], lses[1 - first], b, sq, hq, hd);
    ExpectNear(o, out, 1e-12, "out");
    ExpectNear(l, lse, 1e-12, "lse");
  }
}

// The single query above with dout = 1 (loss = out = 5): p = (1, 3) / 4, delta = dout . out = 5,
// dp = dout * v = (2, 6), ds = p (dp - delta) = (-3/4, 3/4). dq = ds . k = (3/4) ln 3 (the
// covariance of v and k under p: 3/4 * 6 ln 3 - 5 * 3/4 ln 3), dk = ds q = (-3/4, 3/4) and
// dv = p dout = (1/4, 3/4).
TEST(OracleMathAttention, BackwardOneQueryTwoKeysByHand) {
  Vec dq(1, kNan), dk(2, kNan), dv(2, kNan);
  AttentionDims d{.batch = 1, .q_len = 1, .kv_len = 2, .head_dim = 1};
  AttentionBackward(Vec{1}, Vec{0, std::log(3.0)}, Vec{2, 6}, Vec{1}, Vec{5}, Vec{std::log(4.0)},
                    dq, dk, dv, d, 1.0);
  EXPECT_NEAR(dq[0], 0.75 * std::log(3.0), 1e-14);
  ExpectNear(dk, {-0.75, 0.75}, 1e-14);
  ExpectNear(dv, {0.25, 0.75}, 1e-14);
}

// Against central differences of sum(dout .* Attention(q, k, v)): GQA (two query heads per kv
// head), two batches, causal with the queries partly ahead of the keys (one query sees no key:
// its dq is 0) and full attention.
TEST(OracleMathAttention, BackwardMatchesFiniteDifferencesOfAttention) {
  const int64_t b = 2, sq = 4, sk = 5, hq = 4, hkv = 2, hd = 3;
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    Vec q = Random(b * sq * hq * hd, 11), k = Random(b * sk * hkv * hd, 12),
        v = Random(b * sk * hkv * hd, 13);
    const Vec dout = Random(b * sq * hq * hd, 14);
    // Query i at position i, key j at j + 1: under the mask query 0 sees nothing.
    AttentionDims d{.batch = b,
                    .q_len = sq,
                    .kv_len = sk,
                    .q_heads = hq,
                    .kv_heads = hkv,
                    .head_dim = hd,
                    .causal = causal,
                    .q_pos0 = 0,
                    .kv_pos0 = 1};
    const double scale = 0.7;
    Vec out(q.size()), lse(static_cast<size_t>(b * hq * sq));
    Attention(q, k, v, out, lse, d, scale);
    Vec dq(q.size(), kNan), dk(k.size(), kNan), dv(v.size(), kNan);
    AttentionBackward(q, k, v, dout, out, lse, dq, dk, dv, d, scale);
    auto loss = [&] {
      Vec o(q.size());
      Attention(q, k, v, o, {}, d, scale);
      return Dot(dout, o);
    };
    ExpectNear(dq, NumericGrad(q, loss), 1e-8);
    ExpectNear(dk, NumericGrad(k, loss), 1e-8);
    ExpectNear(dv, NumericGrad(v, loss), 1e-8);
    if (causal) {
      for (int64_t c = 0; c < hd; ++c) EXPECT_EQ(dq[c], 0);
    }
  }
}

}  // namespace
}  // namespace kforge::om
