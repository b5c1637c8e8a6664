// The small expression language of task.toml (docs/tasks.md "Expressions"):
// numbers (3, 1.5, 1e-3, with binary suffixes Ki/Mi/Gi), variables, + - * / %,
// unary minus, parentheses, min(a,b), max(a,b), cdiv(a,b), floor(a), ceil(a).
//
// Parsing never recurses more than kMaxExprDepth levels, so hostile input
// gets an error instead of a stack overflow. Errors name what is wrong, the
// 1-based column and the whole expression.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::eval {

using ExprVars = std::map<std::string, double>;

inline constexpr int kMaxExprDepth = 64;

// A parsed expression; cheap to evaluate many times with different variables.
class Expr {
 public:
  static Result<Expr> Parse(std::string_view text);

  Result<double> Evaluate(const ExprVars& vars) const;
  // The distinct variable names the expression reads, in order of appearance.
  std::vector<std::string> Variables() const;
  const std::string& text() const { return text_; }

 private:
  friend class ExprParser;
  enum class Op {
    kNumber,
    kVariable,
    kNeg,
    kAdd,
    kSub,
    kMul,
    kDiv,
    kMod,
    kMin,
    kMax,
    kCdiv,
    kFloor,
    kCeil,
    kSqrt,
    kEq
  };
  struct Node {
    Op op = Op::kNumber;
    double value = 0;    // kNumber
    std::string name;    // kVariable
    int column = 0;      // 1-based, for errors
    int a = -1, b = -1;  // operand node indices
    int height = 1;      // of the subtree rooted here
  };
  Result<double> Eval(int node, const ExprVars& vars) const;
  Status ErrorAt(int column, const std::string& what) const;

  std::string text_;
  std::vector<Node> nodes_;
  int root_ = -1;
};

// Parses and evaluates in one go. The result is always finite.
Result<double> Evaluate(std::string_view text, const ExprVars& vars);

// Evaluates and requires a non-negative integer (below 2^53). `what` names the
// quantity in errors: "shape 'N/W' = 2.5 is not an integer".
Result<int64_t> EvaluateInt(std::string_view text, const ExprVars& vars,
                            std::string_view what = "value");

}  // namespace kforge::eval
