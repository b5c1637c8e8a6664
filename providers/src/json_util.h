// Tolerant readers for untrusted JSON: a missing or mistyped field reads as
// the fallback instead of throwing, because provider payloads drop optional
// objects freely (every *_details object may be absent or partial).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "kforge/core/status.h"

namespace kforge::providers {

using Json = nlohmann::json;

// Parses JSON text; the error names `what` and the parser's byte offset.
Result<Json> ParseJson(std::string_view text, std::string_view what);

// j[key] if j is an object holding key, else a null reference.
const Json& Field(const Json& j, std::string_view key);
std::string GetString(const Json& j, std::string_view key, std::string fallback = {});
// An integer field; a float is truncated. Nothing that does not fit in an
// int64_t (1e300, a NaN, 2^64 - 1) reads as an integer.
std::optional<int64_t> GetOptInt(const Json& j, std::string_view key);
// A token count: an integer in [0, kMaxTokenCount], else the fallback. The
// bound keeps sums of counts from overflowing; no response has 2^40 tokens.
inline constexpr int64_t kMaxTokenCount = int64_t{1} << 40;
int64_t GetCount(const Json& j, std::string_view key, int64_t fallback = 0);
bool Has(const Json& j, std::string_view key);

// At most `max_bytes` of `text`, cut at a character boundary, with each byte
// that is not part of well-formed UTF-8 replaced by U+FFFD. Raw bytes from the
// network quoted in an error message go through it: a message that is not
// UTF-8 makes serialising it as JSON (run events, results) throw.
std::string Utf8Prefix(std::string_view text, size_t max_bytes);

}  // namespace kforge::providers
