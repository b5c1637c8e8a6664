// Typed, located access to a parsed task.toml: every error names the file, the
// line (from toml++ source regions) and the dotted field, e.g.
//   tasks/001_allreduce/task.toml:14: inputs[0].dtype: unknown dtype 'bf17' ...
// Internal to the task loader.
#pragma once

#include <toml++/toml.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::eval::internal {

class TomlFields {
 public:
  explicit TomlFields(std::string file) : file_(std::move(file)) {}

  const std::string& file() const { return file_; }

  // "file:line: field: message" (kInvalidInput). `at` may be null (line 1).
  Status Fail(const toml::node* at, std::string_view field, std::string_view message) const;
  Status FailAtLine(int line, std::string_view field, std::string_view message) const;
  static int Line(const toml::node* at);

  // Every key of `table` must be in `allowed`; the error points at the key.
  Status CheckKeys(const toml::table& table, std::string_view prefix,
                   std::initializer_list<std::string_view> allowed) const;
  Status CheckKeys(const toml::table& table, std::string_view prefix,
                   const std::vector<std::string_view>& allowed) const;

  // Getters for `prefix.key` in `table`. Missing: the required variants fail
  // (pointing at the table), the optional ones return nullopt.
  Result<std::string> RequiredString(const toml::table& table, std::string_view prefix,
                                     std::string_view key) const;
  Result<std::optional<std::string>> OptionalString(const toml::table& table,
                                                    std::string_view prefix,
                                                    std::string_view key) const;
  Result<std::optional<double>> OptionalNumber(const toml::table& table, std::string_view prefix,
                                               std::string_view key) const;
  Result<std::optional<bool>> OptionalBool(const toml::table& table, std::string_view prefix,
                                           std::string_view key) const;
  Result<int64_t> RequiredInteger(const toml::table& table, std::string_view prefix,
                                  std::string_view key) const;

  // An expression: a string, or a number written bare (shape = [4, "N"]).
  // Its syntax is checked here so that typos fail at load time.
  Result<std::string> Expression(const toml::node& node, std::string_view field) const;
  Result<std::optional<std::string>> OptionalExpression(const toml::table& table,
                                                        std::string_view prefix,
                                                        std::string_view key) const;

  // A number node (integer or float) as a double.
  Result<double> Number(const toml::node& node, std::string_view field) const;

 private:
  std::string file_;
};

// "prefix.key", or "key" when prefix is empty.
std::string Join(std::string_view prefix, std::string_view key);
// "prefix[i]".
std::string Index(std::string_view prefix, size_t i);
// "string", "integer", "table", ... for error messages.
std::string_view TypeName(const toml::node& node);

}  // namespace kforge::eval::internal
