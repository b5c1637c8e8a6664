#include "json_util.h"

#include <fmt/format.h>

namespace kforge::providers {

Result<Json> ParseBody(std::string_view text, std::string_view what) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return Error(ErrorKind::kServerError,
                 fmt::format("malformed JSON in {}: '{}'", what, Utf8Prefix(text, 120)));
  }
  return j;
}

int64_t GetCount(const Json& j, std::string_view key, int64_t fallback) {
  return JsonIntIn(j, key, 0, kMaxTokenCount, fallback);
}

namespace {

// The length of the well-formed UTF-8 sequence at text[i] (RFC 3629 table 3-7:
// no overlong forms, no surrogates, nothing past U+10FFFF), or 0.
size_t Utf8SequenceLength(std::string_view text, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (text.size() - i < len) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return len;
}

}  // namespace

std::string Utf8Prefix(std::string_view text, size_t max_bytes) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  for (size_t i = 0; i < text.size();) {
    size_t len = Utf8SequenceLength(text, i);
    std::string_view piece = len > 0 ? text.substr(i, len) : kReplacement;
    if (out.size() + piece.size() > max_bytes) break;
    out += piece;
    i += len > 0 ? len : 1;
  }
  return out;
}

}  // namespace kforge::providers
