#include "task/expr.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

namespace kforge::eval {
namespace {

// Expressions in messages are cut short: a hostile one can be megabytes.
std::string Shown(std::string_view text) {
  constexpr size_t kMax = 80;
  if (text.size() <= kMax) return std::string(text);
  return std::string(text.substr(0, kMax - 3)) + "...";
}

}  // namespace

// Recursive descent over the grammar
//   sum     := product (('+' | '-') product)*
//   product := unary (('*' | '/' | '%') unary)*
//   unary   := ('-' | '+') unary | primary
//   primary := number | name | name '(' sum (',' sum)* ')' | '(' sum ')'
// building a flat node list. Each nesting (parenthesis, function call, unary
// sign) counts against kMaxExprDepth; each costs a bounded number of frames.
class ExprParser {
 public:
  explicit ExprParser(Expr& expr) : e_(expr), s_(expr.text_) {}

  Status Run() {
    SkipSpace();
    if (pos_ == s_.size()) return Error(ErrorKind::kInvalidInput, "empty expression");
    KF_ASSIGN_OR_RETURN(e_.root_, Sum(0));
    SkipSpace();
    if (pos_ != s_.size()) return Unexpected();
    return Status::Ok();
  }

 private:
  using Op = Expr::Op;

  int Add(Op op, int column, int a = -1, int b = -1) {
    Expr::Node n;
    n.op = op;
    n.column = column;
    n.a = a;
    n.b = b;
    // Long operator chains ("1+1+...") build deep trees without deep parsing;
    // evaluation recurses over the tree, so its height is capped too.
    n.height = 1 + std::max(a >= 0 ? e_.nodes_[a].height : 0, b >= 0 ? e_.nodes_[b].height : 0);
    if (n.height > kMaxExprHeight) too_tall_ = true;
    e_.nodes_.push_back(std::move(n));
    return static_cast<int>(e_.nodes_.size()) - 1;
  }
  int Column() const { return static_cast<int>(pos_) + 1; }
  void SkipSpace() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Peek(char c) {
    SkipSpace();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  Status Unexpected() {
    SkipSpace();
    if (pos_ >= s_.size()) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("unexpected end of expression '{}'", Shown(s_)));
    }
    return e_.ErrorAt(Column(), fmt::format("unexpected '{}'", s_[pos_]));
  }
  static constexpr int kMaxExprHeight = 4 * kMaxExprDepth;

  Status TooDeep() {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("expression nested too deeply or too long in '{}'", Shown(s_)));
  }

  Result<int> Sum(int depth) {
    if (depth > kMaxExprDepth) return TooDeep();
    KF_ASSIGN_OR_RETURN(int lhs, Product(depth));
    while (Peek('+') || Peek('-')) {
      const Op op = s_[pos_] == '+' ? Op::kAdd : Op::kSub;
      const int col = Column();
      ++pos_;
      KF_ASSIGN_OR_RETURN(int rhs, Product(depth));
      lhs = Add(op, col, lhs, rhs);
      if (too_tall_) return TooDeep();
    }
    return lhs;
  }

  Result<int> Product(int depth) {
    KF_ASSIGN_OR_RETURN(int lhs, Unary(depth));
    while (Peek('*') || Peek('/') || Peek('%')) {
      const char c = s_[pos_];
      const Op op = c == '*' ? Op::kMul : c == '/' ? Op::kDiv : Op::kMod;
      const int col = Column();
      ++pos_;
      KF_ASSIGN_OR_RETURN(int rhs, Unary(depth));
      lhs = Add(op, col, lhs, rhs);
      if (too_tall_) return TooDeep();
    }
    return lhs;
  }

  Result<int> Unary(int depth) {
    if (depth > kMaxExprDepth) return TooDeep();
    if (Peek('-')) {
      const int col = Column();
      ++pos_;
      KF_ASSIGN_OR_RETURN(int a, Unary(depth + 1));
      return Add(Op::kNeg, col, a);
    }
    if (Peek('+')) {
      ++pos_;
      return Unary(depth + 1);
    }
    return Primary(depth);
  }

  Result<int> Primary(int depth) {
    SkipSpace();
    if (pos_ >= s_.size()) return Unexpected();
    const char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      KF_ASSIGN_OR_RETURN(int inner, Sum(depth + 1));
      if (!Peek(')')) return Expected(")");
      ++pos_;
      return inner;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') return Number();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') return Name(depth);
    return Unexpected();
  }

  Status Expected(std::string_view what) {
    SkipSpace();
    if (pos_ >= s_.size()) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("expected '{}' at the end of '{}'", what, Shown(s_)));
    }
    return e_.ErrorAt(Column(), fmt::format("expected '{}' but found '{}'", what, s_[pos_]));
  }

  Result<int> Number() {
    const int col = Column();
    const size_t start = pos_;
    auto is_digit = [&](size_t i) {
      return i < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i]));
    };
    while (is_digit(pos_)) ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      while (is_digit(pos_)) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < s_.size() && (s_[p] == '+' || s_[p] == '-')) ++p;
      if (!is_digit(p))
        return e_.ErrorAt(col, fmt::format("malformed number '{}'", s_.substr(start, p - start)));
      pos_ = p;
      while (is_digit(pos_)) ++pos_;
    }
    double v = 0;
    const char* first = s_.data() + start;
    const char* last = s_.data() + pos_;
    auto [ptr, ec] = std::from_chars(first, last, v);
    if (ec != std::errc() || ptr != last) {
      return e_.ErrorAt(col, fmt::format("malformed number '{}'", s_.substr(start, pos_ - start)));
    }
    // Binary suffixes: 1Ki = 1024, 1Mi = 1024^2, 1Gi = 1024^3.
    if (pos_ + 1 < s_.size() && s_[pos_ + 1] == 'i') {
      const char u = s_[pos_];
      const double scale = u == 'K' ? 1024.0 : u == 'M' ? 1048576.0 : u == 'G' ? 1073741824.0 : 0.0;
      if (scale != 0) {
        v *= scale;
        pos_ += 2;
      }
    }
    if (pos_ < s_.size() &&
        (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) {
      size_t end = pos_;
      while (end < s_.size() &&
             (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_'))
        ++end;
      return e_.ErrorAt(col, fmt::format("malformed number '{}' (suffixes are Ki, Mi, Gi)",
                                         s_.substr(start, end - start)));
    }
    const int n = Add(Op::kNumber, col);
    e_.nodes_[n].value = v;
    return n;
  }

  Result<int> Name(int depth) {
    const int col = Column();
    const size_t start = pos_;
    while (pos_ < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
      ++pos_;
    std::string name(s_.substr(start, pos_ - start));
    if (!Peek('(')) {
      const int n = Add(Op::kVariable, col);
      e_.nodes_[n].name = std::move(name);
      return n;
    }
    struct Fn {
      const char* name;
      Op op;
      int arity;
    };
    static constexpr Fn kFns[] = {{"min", Op::kMin, 2},   {"max", Op::kMax, 2},
                                  {"cdiv", Op::kCdiv, 2}, {"floor", Op::kFloor, 1},
                                  {"ceil", Op::kCeil, 1}, {"sqrt", Op::kSqrt, 1},
                                  {"eq", Op::kEq, 2}};
    const Fn* fn = nullptr;
    for (const Fn& f : kFns) {
      if (name == f.name) fn = &f;
    }
    if (fn == nullptr) {
      return e_.ErrorAt(
          col, fmt::format("unknown function '{}' (known: min, max, cdiv, floor, ceil, sqrt, eq)",
                           name));
    }
    ++pos_;  // '('
    std::vector<int> args;
    if (!Peek(')')) {
      while (true) {
        KF_ASSIGN_OR_RETURN(int a, Sum(depth + 1));
        args.push_back(a);
        if (Peek(',')) {
          ++pos_;
          continue;
        }
        break;
      }
    }
    if (!Peek(')')) return Expected(")");
    ++pos_;
    if (static_cast<int>(args.size()) != fn->arity) {
      return e_.ErrorAt(col, fmt::format("{}() takes {} argument{}, got {}", name, fn->arity,
                                         fn->arity == 1 ? "" : "s", args.size()));
    }
    return Add(fn->op, col, args[0], fn->arity == 2 ? args[1] : -1);
  }

  Expr& e_;
  std::string_view s_;
  size_t pos_ = 0;
  bool too_tall_ = false;
};

Result<Expr> Expr::Parse(std::string_view text) {
  Expr e;
  e.text_ = std::string(text);
  ExprParser parser(e);
  KF_RETURN_IF_ERROR(parser.Run());
  return e;
}

Status Expr::ErrorAt(int column, const std::string& what) const {
  return Error(ErrorKind::kInvalidInput,
               fmt::format("{} at column {} in '{}'", what, column, Shown(text_)));
}

std::vector<std::string> Expr::Variables() const {
  std::vector<std::string> names;
  for (const Node& n : nodes_) {
    if (n.op != Op::kVariable) continue;
    bool seen = false;
    for (const auto& s : names) seen = seen || s == n.name;
    if (!seen) names.push_back(n.name);
  }
  // Nodes are appended children-first; sort by column for reading order.
  std::vector<std::pair<int, std::string>> by_column;
  for (const auto& s : names) {
    for (const Node& n : nodes_) {
      if (n.op == Op::kVariable && n.name == s) {
        by_column.emplace_back(n.column, s);
        break;
      }
    }
  }
  std::sort(by_column.begin(), by_column.end());
  names.clear();
  for (auto& [col, s] : by_column) names.push_back(std::move(s));
  return names;
}

Result<double> Expr::Evaluate(const ExprVars& vars) const {
  KF_ASSIGN_OR_RETURN(double v, Eval(root_, vars));
  if (!std::isfinite(v)) return ErrorAt(1, fmt::format("result {} is not finite", v));
  return v;
}

Result<double> Expr::Eval(int index, const ExprVars& vars) const {
  const Node& n = nodes_[index];
  switch (n.op) {
    case Op::kNumber:
      return n.value;
    case Op::kVariable: {
      auto it = vars.find(n.name);
      if (it == vars.end()) return ErrorAt(n.column, fmt::format("unknown variable '{}'", n.name));
      return it->second;
    }
    default:
      break;
  }
  KF_ASSIGN_OR_RETURN(double a, Eval(n.a, vars));
  double b = 0;
  if (n.b >= 0) {
    KF_ASSIGN_OR_RETURN(b, Eval(n.b, vars));
  }
  switch (n.op) {
    case Op::kNeg:
      return -a;
    case Op::kAdd:
      return a + b;
    case Op::kSub:
      return a - b;
    case Op::kMul:
      return a * b;
    case Op::kDiv:
    case Op::kCdiv:
      if (b == 0) return ErrorAt(n.column, "division by zero");
      return n.op == Op::kDiv ? a / b : std::ceil(a / b);
    case Op::kMod:
      if (a != std::floor(a) || b != std::floor(b)) {
        return ErrorAt(n.column, fmt::format("'%' needs integers, got {} % {}", a, b));
      }
      if (b == 0) return ErrorAt(n.column, "modulo by zero");
      return std::fmod(a, b);
    case Op::kMin:
      return std::min(a, b);
    case Op::kMax:
      return std::max(a, b);
    case Op::kFloor:
      return std::floor(a);
    case Op::kCeil:
      return std::ceil(a);
    case Op::kEq:
      return a == b ? 1.0 : 0.0;
    case Op::kSqrt:
      if (a < 0) return ErrorAt(n.column, fmt::format("sqrt of a negative number ({})", a));
      return std::sqrt(a);
    default:
      break;
  }
  return Error(ErrorKind::kInternal, "bad expression node");
}

Result<double> Evaluate(std::string_view text, const ExprVars& vars) {
  KF_ASSIGN_OR_RETURN(Expr e, Expr::Parse(text));
  return e.Evaluate(vars);
}

Result<int64_t> EvaluateInt(std::string_view text, const ExprVars& vars, std::string_view what) {
  KF_ASSIGN_OR_RETURN(double v, Evaluate(text, vars));
  if (v != std::floor(v)) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{} '{}' = {} is not an integer", what, text, v));
  }
  if (v < 0) {
    return Error(ErrorKind::kInvalidInput, fmt::format("{} '{}' = {} is negative", what, text, v));
  }
  if (v >= 9007199254740992.0) {
    return Error(ErrorKind::kInvalidInput, fmt::format("{} '{}' = {} is too large", what, text, v));
  }
  return static_cast<int64_t>(v);
}

}  // namespace kforge::eval
