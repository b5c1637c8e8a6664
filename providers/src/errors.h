// Classification of provider failures into the ErrorKinds callers branch on,
// and the server's retry hints. One classifier serves every wire format
// because their error shapes overlap (docs/providers.md, "Failures").
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "kforge/core/status.h"
#include "kforge/providers/client.h"
#include "kforge/providers/transport.h"

namespace kforge::providers {

struct ProviderError {
  Status status;
  std::optional<std::chrono::milliseconds> retry_after;  // server-requested delay
  std::optional<bool> should_retry;                      // x-should-retry
  // Usage the provider reported before the attempt failed (a stream broken
  // after its usage events): billed, so the caller's budgets must count it.
  Usage billed;
};

// Classifies an HTTP error response (status >= 300) from its status, headers
// and body. `provider` names the provider in the message.
ProviderError ClassifyHttpError(std::string_view provider, const HttpResponseHead& head,
                                std::string_view body);

// Classifies an error object found inside a 200 stream (Anthropic `event:
// error`, Chat `data: {"error":…}`, Responses `error`/`response.failed`,
// Gemini `data: {"error":…}`). `payload` is the whole event JSON text.
ProviderError ClassifyStreamError(std::string_view payload);

// Parses "34.4s" (google.protobuf.Duration JSON), "250ms", "2.5s".
std::optional<std::chrono::milliseconds> ParseDurationText(std::string_view text);

// Replaces every occurrence of `secret` (when 8+ chars) and anything shaped
// like a provider key (sk-…, sk-ant-…, AIza…) with "[redacted]".
std::string Redact(std::string text, std::string_view secret);

}  // namespace kforge::providers
