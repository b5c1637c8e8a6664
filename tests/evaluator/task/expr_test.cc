#include "task/expr.h"

#include <gtest/gtest.h>

namespace kforge::eval {
namespace {

const ExprVars kVars = {{"N", 1000}, {"W", 4}, {"elem", 2}, {"root", 1}};

double Eval(std::string_view text) {
  auto r = Evaluate(text, kVars);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().ToString();
  return r.ok() ? *r : -12345;
}

std::string ErrorOf(std::string_view text, const ExprVars& vars = kVars) {
  auto r = Evaluate(text, vars);
  EXPECT_FALSE(r.ok()) << text << " unexpectedly = " << (r.ok() ? *r : 0);
  return r.ok() ? "" : r.status().message();
}

TEST(Expr, Numbers) {
  EXPECT_EQ(Eval("3"), 3);
  EXPECT_EQ(Eval("1.5"), 1.5);
  EXPECT_EQ(Eval("1e-3"), 1e-3);
  EXPECT_EQ(Eval("2.5E2"), 250);
  EXPECT_EQ(Eval(".5"), 0.5);
  EXPECT_EQ(Eval("2Ki"), 2048);
  EXPECT_EQ(Eval("3Mi"), 3 * 1048576.0);
  EXPECT_EQ(Eval("1Gi"), 1073741824.0);
  EXPECT_EQ(Eval("0.5Ki"), 512);
}

TEST(Expr, OperatorsPrecedenceAndVariables) {
  EXPECT_EQ(Eval("2 + 3 * 4"), 14);
  EXPECT_EQ(Eval("(2 + 3) * 4"), 20);
  EXPECT_EQ(Eval("10 - 4 - 3"), 3);  // left associative
  EXPECT_EQ(Eval("64 / 4 / 2"), 8);
  EXPECT_EQ(Eval("7 / 2"), 3.5);  // true division
  EXPECT_EQ(Eval("7 % 3"), 1);
  EXPECT_EQ(Eval("-7 % 3"), -1);
  EXPECT_EQ(Eval("-3 + 5"), 2);
  EXPECT_EQ(Eval("--3"), 3);
  EXPECT_EQ(Eval("-(2 * W)"), -8);
  EXPECT_EQ(Eval("+W"), 4);
  EXPECT_EQ(Eval("1Mi / elem"), 524288);
  EXPECT_EQ(Eval("N * elem"), 2000);
  EXPECT_EQ(Eval("2 * (W - 1) / W"), 1.5);
  EXPECT_EQ(Eval("  N\t/ W "), 250);
}

TEST(Expr, Functions) {
  EXPECT_EQ(Eval("min(W, 3)"), 3);
  EXPECT_EQ(Eval("max(W, 3)"), 4);
  EXPECT_EQ(Eval("cdiv(7, 2)"), 4);
  EXPECT_EQ(Eval("cdiv(8, 2)"), 4);
  EXPECT_EQ(Eval("floor(7 / 2)"), 3);
  EXPECT_EQ(Eval("ceil(3.2)"), 4);
  EXPECT_EQ(Eval("floor(-0.5)"), -1);
  EXPECT_EQ(Eval("max(min(N, 10), cdiv(N, W) * 2)"), 500);
  EXPECT_EQ(Eval("sqrt(W * 16)"), 8);               // tolerances that grow like sqrt(K)
  EXPECT_EQ(Eval("1 + (W - 1) * eq(root, 1)"), 4);  // a rank-dependent shape
  EXPECT_EQ(Eval("1 + (W - 1) * eq(root, 0)"), 1);
}

TEST(Expr, ErrorsSayWhatAndWhere) {
  EXPECT_EQ(ErrorOf("N*M"), "unknown variable 'M' at column 3 in 'N*M'");
  EXPECT_EQ(ErrorOf("N / (W - 4)"), "division by zero at column 3 in 'N / (W - 4)'");
  EXPECT_EQ(ErrorOf("cdiv(N, 0)"), "division by zero at column 1 in 'cdiv(N, 0)'");
  EXPECT_EQ(ErrorOf("N % 0"), "modulo by zero at column 3 in 'N % 0'");
  EXPECT_EQ(ErrorOf("2.5 % 2"), "'%' needs integers, got 2.5 % 2 at column 5 in '2.5 % 2'");
  EXPECT_EQ(ErrorOf("log(N)"),
            "unknown function 'log' (known: min, max, cdiv, floor, ceil, sqrt, eq) at column 1 in "
            "'log(N)'");
  EXPECT_EQ(ErrorOf("sqrt(1 - N)"),
            "sqrt of a negative number (-999) at column 1 in 'sqrt(1 - N)'");
  EXPECT_EQ(ErrorOf("min(N)"), "min() takes 2 arguments, got 1 at column 1 in 'min(N)'");
  EXPECT_EQ(ErrorOf("floor(1, 2)"), "floor() takes 1 argument, got 2 at column 1 in 'floor(1, 2)'");
  EXPECT_EQ(ErrorOf("(N + 1"), "expected ')' at the end of '(N + 1'");
  EXPECT_EQ(ErrorOf("N + 1)"), "unexpected ')' at column 6 in 'N + 1)'");
  EXPECT_EQ(ErrorOf("N $ 2"), "unexpected '$' at column 3 in 'N $ 2'");
  EXPECT_EQ(ErrorOf("N *"), "unexpected end of expression 'N *'");
  EXPECT_EQ(ErrorOf("   "), "empty expression");
  EXPECT_EQ(ErrorOf("1e"), "malformed number '1e' at column 1 in '1e'");
  EXPECT_EQ(ErrorOf("4Kb"),
            "malformed number '4Kb' (suffixes are Ki, Mi, Gi) at column 1 in '4Kb'");
  EXPECT_EQ(ErrorOf("1.2.3"), "unexpected '.' at column 4 in '1.2.3'");
  EXPECT_NE(ErrorOf("1e308 * 10").find("is not finite"), std::string::npos);
}

TEST(Expr, HostileInputGetsAnErrorNotACrash) {
  const std::string deep = std::string(100000, '(') + "1" + std::string(100000, ')');
  EXPECT_NE(ErrorOf(deep).find("nested too deeply"), std::string::npos);
  EXPECT_NE(ErrorOf(std::string(100000, '-') + "1").find("nested too deeply"), std::string::npos);
  std::string chain = "1";
  for (int i = 0; i < 100000; ++i) chain += "+1";
  EXPECT_NE(ErrorOf(chain).find("too long"), std::string::npos);
  std::string nested_calls;
  for (int i = 0; i < 10000; ++i) nested_calls += "floor(";
  EXPECT_NE(ErrorOf(nested_calls + "1" + std::string(10000, ')')).find("nested too deeply"),
            std::string::npos);
  // Within the limits, a long but legal expression still works.
  std::string ok = "1";
  for (int i = 0; i < 200; ++i) ok += "+1";
  EXPECT_EQ(Eval(ok), 201);
  EXPECT_EQ(Eval(std::string(20, '(') + "W" + std::string(20, ')')), 4);
}

TEST(Expr, ParsedExpressionReportsVariablesAndReevaluates) {
  auto e = Expr::Parse("cdiv(N, W) * elem + N");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->Variables(), (std::vector<std::string>{"N", "W", "elem"}));
  EXPECT_EQ(*e->Evaluate({{"N", 10}, {"W", 4}, {"elem", 2}}), 16);
  EXPECT_EQ(*e->Evaluate({{"N", 8}, {"W", 2}, {"elem", 4}}), 24);
  EXPECT_FALSE(e->Evaluate({{"N", 8}}).ok());
  EXPECT_TRUE(Expr::Parse("min(a, b)")->Variables() == (std::vector<std::string>{"a", "b"}));
}

TEST(Expr, EvaluateIntRequiresNonNegativeIntegers) {
  EXPECT_EQ(*EvaluateInt("N / W", kVars, "shape"), 250);
  EXPECT_EQ(*EvaluateInt("0", kVars), 0);
  auto frac = EvaluateInt("N/W", {{"N", 10}, {"W", 4}}, "shape");
  ASSERT_FALSE(frac.ok());
  EXPECT_EQ(frac.status().message(), "shape 'N/W' = 2.5 is not an integer");
  auto neg = EvaluateInt("root - W", kVars, "ranks");
  ASSERT_FALSE(neg.ok());
  EXPECT_EQ(neg.status().message(), "ranks 'root - W' = -3 is negative");
  EXPECT_FALSE(EvaluateInt("2Gi * 4Gi * 4Gi", kVars).ok());
  EXPECT_FALSE(EvaluateInt("K", kVars).ok());
}

}  // namespace
}  // namespace kforge::eval
