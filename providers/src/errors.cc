#include "errors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>

#include "json_util.h"
#include "kforge/core/scan.h"

namespace kforge::providers {
namespace {

using std::chrono::milliseconds;

// A server-sent delay in milliseconds as a duration: none when negative or not
// a number; delays past a millennium are held there (the retry cap refuses them
// anyway), so that converting "1e300" or "inf" to an integer is defined.
std::optional<milliseconds> Millis(double ms) {
  if (!(ms >= 0)) return std::nullopt;
  constexpr double kMillennium = 1000.0 * 365 * 24 * 3600 * 1000;
  return milliseconds(static_cast<int64_t>(std::ceil(std::min(ms, kMillennium))));
}

// The fields every provider's error body carries under one name or another.
struct ErrorInfo {
  std::string type;    // OpenAI/Anthropic/llama.cpp error.type
  std::string code;    // OpenAI error.code (string), vLLM/llama.cpp (int, as text)
  std::string status;  // Google RPC status ("RESOURCE_EXHAUSTED")
  std::string message;
  std::string reason;       // Google ErrorInfo.reason ("API_KEY_INVALID")
  std::string quota_id;     // Google QuotaFailure violation
  std::string detail_code;  // Anthropic error.details.error_code
  std::string request_id;
  std::optional<milliseconds> retry_delay;  // Google RetryInfo.retryDelay
  bool parsed = false;
};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool Contains(std::string_view hay, std::string_view needle) {
  return Lower(hay).find(Lower(needle)) != std::string::npos;
}

std::string ScalarText(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  return {};
}

ErrorInfo ExtractInfo(std::string_view body) {
  ErrorInfo info;
  Json j = Json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return info;
  info.parsed = true;
  info.request_id = JsonString(j, "request_id");
  // Anthropic: {"type":"error","error":{…}}; OpenAI/Gemini/llama.cpp: {"error":{…}};
  // the Responses stream `error` event and old vLLM bodies put the fields at the top.
  const Json& e = JsonField(j, "error").is_object() ? JsonField(j, "error")
                  : JsonField(JsonField(j, "response"), "error").is_object()
                      ? JsonField(JsonField(j, "response"), "error")
                      : j;
  info.type = JsonString(e, "type");
  if (info.type == "error") info.type.clear();
  info.code = ScalarText(JsonField(e, "code"));
  info.status = JsonString(e, "status");
  info.message = JsonString(e, "message");
  if (info.message.empty() && JsonField(j, "error").is_string())
    info.message = JsonField(j, "error").get<std::string>();
  info.detail_code = JsonString(JsonField(e, "details"), "error_code");
  const Json& details = JsonField(e, "details");
  if (details.is_array()) {
    for (const Json& d : details) {
      std::string at = JsonString(d, "@type");
      if (Contains(at, "RetryInfo"))
        info.retry_delay = ParseDurationText(JsonString(d, "retryDelay"));
      if (Contains(at, "ErrorInfo")) info.reason = JsonString(d, "reason");
      if (Contains(at, "QuotaFailure") && JsonField(d, "violations").is_array()) {
        for (const Json& v : JsonField(d, "violations")) {
          if (info.quota_id.empty()) info.quota_id = JsonString(v, "quotaId");
        }
      }
    }
  }
  return info;
}

// OpenAI ends rate-limit messages with "Please try again in 2.5s." or "in 120ms."
// Finds the first "try again in <digits>[.<digits>](ms|s)", case ignored.
std::optional<milliseconds> DelayFromMessage(std::string_view message) {
  constexpr std::string_view kLead = "try again in ";
  for (size_t at = scan::FindIgnoreCase(message, kLead); at != std::string_view::npos;
       at = scan::FindIgnoreCase(message, kLead, at + 1)) {
    size_t begin = at + kLead.size();
    size_t end = scan::SkipWhile(message, begin, scan::IsDigit);
    if (end == begin) continue;
    if (end + 1 < message.size() && message[end] == '.' && scan::IsDigit(message[end + 1])) {
      end = scan::SkipWhile(message, end + 1, scan::IsDigit);
    }
    bool ms = scan::AtIgnoreCase(message, end, "ms");
    if (!ms && !scan::AtIgnoreCase(message, end, "s")) continue;
    double v = std::strtod(std::string(message.substr(begin, end - begin)).c_str(), nullptr);
    return Millis(ms ? v : v * 1000);
  }
  return std::nullopt;
}

// retry-after is delta-seconds (possibly fractional) or an HTTP-date (RFC 9110 §10.2.3).
std::optional<milliseconds> ParseRetryAfter(const std::string& value) {
  if (value.empty()) return std::nullopt;
  char* end = nullptr;
  double secs = std::strtod(value.c_str(), &end);
  if (end != value.c_str() && *end == '\0') return Millis(secs * 1000);
  std::tm tm{};
  if (strptime(value.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm) == nullptr) return std::nullopt;
  double delta = std::difftime(timegm(&tm), std::time(nullptr));
  return milliseconds(static_cast<int64_t>(std::max(0.0, delta) * 1000));
}

bool LooksLikeContextOverflow(const ErrorInfo& info) {
  if (info.code == "context_length_exceeded" || info.type == "exceed_context_size_error")
    return true;
  for (const char* p : {"maximum context length", "context window", "prompt is too long",
                        "exceeds the available context", "input token count", "too many tokens",
                        "context_length_exceeded"}) {
    if (Contains(info.message, p)) return true;
  }
  return false;
}

ErrorKind Classify(int http_status, const ErrorInfo& info) {
  const std::string type = Lower(info.type), code = Lower(info.code), status = info.status;
  // Billing and spend caps come first: they arrive as 429s (OpenAI
  // insufficient_quota, Anthropic enforced_spend_limit_reached) or 402, and
  // no amount of waiting fixes them.
  if (type == "insufficient_quota" || code == "insufficient_quota" || type == "billing_error" ||
      info.detail_code == "enforced_spend_limit_reached" || http_status == 402) {
    return ErrorKind::kQuota;
  }
  // Gemini: a per-day quota id means the daily allowance is gone.
  if (status == "RESOURCE_EXHAUSTED" && Contains(info.quota_id, "PerDay")) return ErrorKind::kQuota;
  if (http_status == 401 || http_status == 403 || type == "authentication_error" ||
      type == "permission_error" || code == "invalid_api_key" || info.reason == "API_KEY_INVALID" ||
      status == "UNAUTHENTICATED" || status == "PERMISSION_DENIED") {
    return ErrorKind::kAuth;
  }
  if (LooksLikeContextOverflow(info)) return ErrorKind::kContextOverflow;
  // OpenAI's "Request too large for … tokens per min (TPM): Limit X, Requested Y"
  // is a 429 that can never succeed with the same prompt.
  if (Contains(info.message, "request too large")) return ErrorKind::kInvalidInput;
  if (code == "content_filter" || code == "content_policy_violation" ||
      status == "PROHIBITED_CONTENT") {
    return ErrorKind::kContentFilter;
  }
  if (http_status == 429 || type == "rate_limit_error" || type == "rate_limit_exceeded" ||
      type == "requests" || type == "tokens" || code == "rate_limit_exceeded" ||
      status == "RESOURCE_EXHAUSTED") {
    return ErrorKind::kRateLimited;
  }
  if (http_status == 529 || http_status == 503 || type == "overloaded_error" ||
      type == "unavailable_error" || status == "UNAVAILABLE") {
    return ErrorKind::kOverloaded;
  }
  if (http_status == 408 || http_status == 504 || type == "timeout_error" ||
      status == "DEADLINE_EXCEEDED") {
    return ErrorKind::kTimeout;
  }
  if (http_status >= 500 || http_status == 409 || type == "api_error" || type == "server_error" ||
      code == "server_error" || status == "INTERNAL") {
    return ErrorKind::kServerError;
  }
  if (http_status == 0) return ErrorKind::kServerError;  // an unnamed error inside a stream
  return ErrorKind::kInvalidInput;
}

std::string Describe(std::string_view where, const ErrorInfo& info, std::string_view raw_body) {
  std::string label = !info.type.empty()     ? info.type
                      : !info.status.empty() ? info.status
                                             : info.code;
  std::string msg = info.message;
  if (!info.parsed || msg.empty()) {
    msg = raw_body.empty() ? "(empty body)" : Utf8Prefix(raw_body, 300);
  }
  std::string out = label.empty() ? fmt::format("{}: {}", where, msg)
                                  : fmt::format("{}: {}: {}", where, label, msg);
  if (!info.request_id.empty()) {
    out +=
        fmt::format(" (request id {})", Utf8Prefix(info.request_id, 200));  // may be a raw header
  }
  return out;
}

}  // namespace

ProviderError ClassifyHttpError(std::string_view provider, const HttpResponseHead& head,
                                std::string_view body) {
  ErrorInfo info = ExtractInfo(body);
  if (info.request_id.empty()) info.request_id = head.Header("x-request-id");
  if (info.request_id.empty()) info.request_id = head.Header("request-id");
  ProviderError err;
  err.status = Status(Classify(head.status, info),
                      Describe(fmt::format("{} HTTP {}", provider, head.status), info, body));
  // The first present of retry-after-ms (OpenAI), retry-after, Google
  // RetryInfo, then the "try again in" hint (research notes §9.2).
  if (std::string ms = head.Header("retry-after-ms"); !ms.empty()) {
    char* end = nullptr;
    double v = std::strtod(ms.c_str(), &end);
    if (end != ms.c_str()) err.retry_after = Millis(v);
  }
  if (!err.retry_after) err.retry_after = ParseRetryAfter(head.Header("retry-after"));
  if (!err.retry_after) err.retry_after = info.retry_delay;
  if (!err.retry_after) err.retry_after = DelayFromMessage(info.message);
  if (std::string sr = Lower(head.Header("x-should-retry")); sr == "true" || sr == "false") {
    err.should_retry = (sr == "true");
  }
  return err;
}

ProviderError ClassifyStreamError(std::string_view payload) {
  ErrorInfo info = ExtractInfo(payload);
  ProviderError err;
  err.status = Status(Classify(0, info), Describe("error inside the stream", info, payload));
  err.retry_after = info.retry_delay ? info.retry_delay : DelayFromMessage(info.message);
  return err;
}

std::optional<milliseconds> ParseDurationText(std::string_view text) {
  std::string s(text);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) return std::nullopt;
  std::string unit(end);
  if (unit == "s" || unit.empty()) return Millis(v * 1000);
  if (unit == "ms") return Millis(v);
  return std::nullopt;
}

namespace {

bool IsKeyChar(char c) { return scan::IsAlnum(c) || c == '_' || c == '-'; }

}  // namespace

std::string Redact(std::string text, std::string_view secret) {
  constexpr std::string_view kRedacted = "[redacted]";
  if (secret.size() >= 8) {
    // Search on after the replacement: a secret found inside "[redacted]"
    // would otherwise be replaced forever.
    for (size_t pos = text.find(secret); pos != std::string::npos;
         pos = text.find(secret, pos + kRedacted.size())) {
      text.replace(pos, secret.size(), kRedacted);
    }
  }
  // Key shapes: "sk-" and 16+ key characters, "AIza" and 30+; a match takes
  // the whole run of key characters, and matches do not overlap.
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    size_t key_end = i;
    if (scan::At(text, i, "sk-")) {
      size_t end = scan::SkipWhile(text, i + 3, IsKeyChar);
      if (end - (i + 3) >= 16) key_end = end;
    } else if (scan::At(text, i, "AIza")) {
      size_t end = scan::SkipWhile(text, i + 4, IsKeyChar);
      if (end - (i + 4) >= 30) key_end = end;
    }
    if (key_end > i) {
      out += kRedacted;
      i = key_end;
    } else {
      out += text[i++];
    }
  }
  return out;
}

}  // namespace kforge::providers
