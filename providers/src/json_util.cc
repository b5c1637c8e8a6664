#include "json_util.h"

#include <fmt/format.h>

namespace kforge::providers {

Result<Json> ParseJson(std::string_view text, std::string_view what) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    std::string head(text.substr(0, 120));
    return Error(ErrorKind::kServerError, fmt::format("malformed JSON in {}: '{}'", what, head));
  }
  return j;
}

const Json& Field(const Json& j, std::string_view key) {
  static const Json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::string GetString(const Json& j, std::string_view key, std::string fallback) {
  const Json& v = Field(j, key);
  return v.is_string() ? v.get<std::string>() : fallback;
}

std::optional<int64_t> GetOptInt(const Json& j, std::string_view key) {
  const Json& v = Field(j, key);
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_float()) return static_cast<int64_t>(v.get<double>());
  return std::nullopt;
}

int64_t GetInt(const Json& j, std::string_view key, int64_t fallback) {
  return GetOptInt(j, key).value_or(fallback);
}

bool Has(const Json& j, std::string_view key) { return !Field(j, key).is_null(); }

}  // namespace kforge::providers
