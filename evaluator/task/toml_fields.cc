#include "toml_fields.h"

#include <fmt/format.h>

#include <cmath>

#include "task/expr.h"

namespace kforge::eval::internal {

std::string Join(std::string_view prefix, std::string_view key) {
  if (prefix.empty()) return std::string(key);
  return fmt::format("{}.{}", prefix, key);
}

std::string Index(std::string_view prefix, size_t i) { return fmt::format("{}[{}]", prefix, i); }

std::string_view TypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table:
      return "table";
    case toml::node_type::array:
      return "array";
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    default:
      return "nothing";
  }
}

int TomlFields::Line(const toml::node* at) {
  if (at == nullptr) return 1;
  const auto line = static_cast<int>(at->source().begin.line);
  return line > 0 ? line : 1;
}

Status TomlFields::FailAtLine(int line, std::string_view field, std::string_view message) const {
  return Error(ErrorKind::kInvalidInput, fmt::format("{}:{}: {}: {}", file_, line, field, message));
}

Status TomlFields::Fail(const toml::node* at, std::string_view field,
                        std::string_view message) const {
  return FailAtLine(Line(at), field, message);
}

Status TomlFields::CheckKeys(const toml::table& table, std::string_view prefix,
                             std::initializer_list<std::string_view> allowed) const {
  return CheckKeys(table, prefix, std::vector<std::string_view>(allowed));
}

Status TomlFields::CheckKeys(const toml::table& table, std::string_view prefix,
                             const std::vector<std::string_view>& allowed) const {
  for (const auto& [key, value] : table) {
    bool known = false;
    for (auto a : allowed) known = known || key.str() == a;
    if (known) continue;
    std::string list;
    for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    const auto line = static_cast<int>(key.source().begin.line);
    return FailAtLine(line > 0 ? line : Line(&value), Join(prefix, key.str()),
                      fmt::format("unknown field (expected one of: {})", list));
  }
  return Status::Ok();
}

Result<std::string> TomlFields::RequiredString(const toml::table& table, std::string_view prefix,
                                               std::string_view key) const {
  KF_ASSIGN_OR_RETURN(auto s, OptionalString(table, prefix, key));
  if (!s) return Fail(&table, Join(prefix, key), "required field is missing");
  return *s;
}

Result<std::optional<std::string>> TomlFields::OptionalString(const toml::table& table,
                                                              std::string_view prefix,
                                                              std::string_view key) const {
  const toml::node* n = table.get(key);
  if (n == nullptr) return std::optional<std::string>();
  if (!n->is_string()) {
    return Fail(n, Join(prefix, key), fmt::format("expected a string, found {}", TypeName(*n)));
  }
  return std::optional<std::string>(n->as_string()->get());
}

Result<double> TomlFields::Number(const toml::node& node, std::string_view field) const {
  if (node.is_integer()) return static_cast<double>(node.as_integer()->get());
  if (node.is_floating_point()) {
    const double v = node.as_floating_point()->get();
    if (!std::isfinite(v)) return Fail(&node, field, "must be a finite number");
    return v;
  }
  return Fail(&node, field, fmt::format("expected a number, found {}", TypeName(node)));
}

Result<std::optional<double>> TomlFields::OptionalNumber(const toml::table& table,
                                                         std::string_view prefix,
                                                         std::string_view key) const {
  const toml::node* n = table.get(key);
  if (n == nullptr) return std::optional<double>();
  KF_ASSIGN_OR_RETURN(double v, Number(*n, Join(prefix, key)));
  return std::optional<double>(v);
}

Result<std::optional<bool>> TomlFields::OptionalBool(const toml::table& table,
                                                     std::string_view prefix,
                                                     std::string_view key) const {
  const toml::node* n = table.get(key);
  if (n == nullptr) return std::optional<bool>();
  if (!n->is_boolean()) {
    return Fail(n, Join(prefix, key),
                fmt::format("expected true or false, found {}", TypeName(*n)));
  }
  return std::optional<bool>(n->as_boolean()->get());
}

Result<int64_t> TomlFields::RequiredInteger(const toml::table& table, std::string_view prefix,
                                            std::string_view key) const {
  const toml::node* n = table.get(key);
  if (n == nullptr) return Fail(&table, Join(prefix, key), "required field is missing");
  if (!n->is_integer()) {
    return Fail(n, Join(prefix, key), fmt::format("expected an integer, found {}", TypeName(*n)));
  }
  return n->as_integer()->get();
}

Result<std::string> TomlFields::Expression(const toml::node& node, std::string_view field) const {
  std::string text;
  if (node.is_string()) {
    text = node.as_string()->get();
  } else if (node.is_integer()) {
    text = fmt::format("{}", node.as_integer()->get());
  } else if (node.is_floating_point()) {
    text = fmt::format("{}", node.as_floating_point()->get());
  } else {
    return Fail(&node, field,
                fmt::format("expected an expression (string or number), found {}", TypeName(node)));
  }
  auto parsed = Expr::Parse(text);
  if (!parsed.ok()) return Fail(&node, field, parsed.status().message());
  return text;
}

Result<std::optional<std::string>> TomlFields::OptionalExpression(const toml::table& table,
                                                                  std::string_view prefix,
                                                                  std::string_view key) const {
  const toml::node* n = table.get(key);
  if (n == nullptr) return std::optional<std::string>();
  KF_ASSIGN_OR_RETURN(std::string e, Expression(*n, Join(prefix, key)));
  return std::optional<std::string>(std::move(e));
}

}  // namespace kforge::eval::internal
