#include "kforge/core/json.h"

#include <cmath>
#include <limits>

namespace kforge {

using nlohmann::json;

Result<json> ParseJson(std::string_view text, std::string_view what, ErrorKind kind) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error(kind, std::string(what) + ": not valid JSON");
  return j;
}

const json& JsonField(const json& j, std::string_view key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

bool JsonHas(const json& j, std::string_view key) { return !JsonField(j, key).is_null(); }

std::string JsonString(const json& j, std::string_view key, std::string fallback) {
  const json& v = JsonField(j, key);
  return v.is_string() ? v.get<std::string>() : fallback;
}

std::optional<double> JsonOptNumber(const json& j, std::string_view key) {
  const json& v = JsonField(j, key);
  if (!v.is_number()) return std::nullopt;
  return v.get<double>();
}

double JsonNumber(const json& j, std::string_view key, double fallback) {
  return JsonOptNumber(j, key).value_or(fallback);
}

bool JsonBool(const json& j, std::string_view key, bool fallback) {
  const json& v = JsonField(j, key);
  return v.is_boolean() ? v.get<bool>() : fallback;
}

std::optional<int64_t> JsonOptInt(const json& j, std::string_view key) {
  const json& v = JsonField(j, key);
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    // Converting a double outside int64_t's range is undefined behaviour;
    // 2^63 is exactly representable, so the bounds are exact.
    double d = v.get<double>();
    constexpr double kLimit = 9223372036854775808.0;
    if (!std::isfinite(d) || d >= kLimit || d < -kLimit) return std::nullopt;
    return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

int64_t JsonIntIn(const json& j, std::string_view key, int64_t lo, int64_t hi, int64_t fallback) {
  std::optional<int64_t> v = JsonOptInt(j, key);
  return v && *v >= lo && *v <= hi ? *v : fallback;
}

}  // namespace kforge
