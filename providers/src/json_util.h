// Provider payloads drop optional objects freely (every *_details object may
// be absent or partial): adapters read them with kforge/core/json.h's
// tolerant getters, and these helpers on top.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "kforge/core/json.h"
#include "kforge/core/status.h"

namespace kforge::providers {

using Json = nlohmann::json;

// Parses a provider body; the error (kServerError) names `what` and quotes
// the start of the body.
Result<Json> ParseBody(std::string_view text, std::string_view what);

// A token count: an integer in [0, kMaxTokenCount], else the fallback. The
// bound keeps sums of counts from overflowing; no response has 2^40 tokens.
inline constexpr int64_t kMaxTokenCount = int64_t{1} << 40;
int64_t GetCount(const Json& j, std::string_view key, int64_t fallback = 0);

// At most `max_bytes` of `text`, cut at a character boundary, with each byte
// that is not part of well-formed UTF-8 replaced by U+FFFD. Raw bytes from the
// network quoted in an error message go through it: a message that is not
// UTF-8 makes serialising it as JSON (run events, results) throw.
std::string Utf8Prefix(std::string_view text, size_t max_bytes);

}  // namespace kforge::providers
