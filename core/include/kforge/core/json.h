// Tolerant readers of JSON from outside (provider bodies, stored and remote
// documents, hardware cards): a missing or mistyped field reads as the
// fallback instead of throwing, and no value, however large, converts with
// undefined behaviour. Every module reads outside JSON through these.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "kforge/core/status.h"

namespace kforge {

// Parses without throwing; the error (of `kind`) names `what`.
Result<nlohmann::json> ParseJson(std::string_view text, std::string_view what,
                                 ErrorKind kind = ErrorKind::kInvalidInput);

// j[key] if j is an object holding key, else a null reference.
const nlohmann::json& JsonField(const nlohmann::json& j, std::string_view key);
bool JsonHas(const nlohmann::json& j, std::string_view key);
std::string JsonString(const nlohmann::json& j, std::string_view key, std::string fallback = {});
std::optional<double> JsonOptNumber(const nlohmann::json& j, std::string_view key);
double JsonNumber(const nlohmann::json& j, std::string_view key, double fallback = 0);
bool JsonBool(const nlohmann::json& j, std::string_view key, bool fallback = false);
// An integer (a float is truncated); nothing that does not fit in an int64_t
// (1e300, 2^64 - 1) reads as one.
std::optional<int64_t> JsonOptInt(const nlohmann::json& j, std::string_view key);
// An integer in [lo, hi], else the fallback.
int64_t JsonIntIn(const nlohmann::json& j, std::string_view key, int64_t lo, int64_t hi,
                  int64_t fallback);

}  // namespace kforge
