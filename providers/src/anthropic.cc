// Anthropic Messages (research notes §4).
#include <fmt/format.h>

#include "adapter.h"
#include "json_util.h"

namespace kforge::providers {
namespace {

// The SDK pins this version; newer behaviour comes through anthropic-beta.
constexpr const char* kApiVersion = "2023-06-01";
// max_tokens is required; used when neither the request nor the registry sets one.
constexpr int kFallbackMaxTokens = 8192;

FinishReason MapStop(const std::string& r) {
  if (r == "end_turn" || r == "stop_sequence" || r == "tool_use" || r == "pause_turn")
    return FinishReason::kStop;
  if (r == "max_tokens" || r == "model_context_window_exceeded") return FinishReason::kLength;
  if (r == "refusal") return FinishReason::kContentFilter;
  return FinishReason::kOther;
}

// input_tokens counts only the uncached part: the total is input +
// cache_creation_input_tokens + cache_read_input_tokens. output_tokens
// includes thinking. Fields absent from `u` keep their earlier value, because
// message_delta repeats only some counts (cumulatively).
void MergeUsage(const Json& u, Usage& usage, int64_t& uncached) {
  if (!u.is_object()) return;
  uncached = GetCount(u, "input_tokens", uncached);
  usage.cached_input_tokens = GetCount(u, "cache_read_input_tokens", usage.cached_input_tokens);
  usage.cache_write_input_tokens =
      GetCount(u, "cache_creation_input_tokens", usage.cache_write_input_tokens);
  usage.input_tokens = uncached + usage.cached_input_tokens + usage.cache_write_input_tokens;
  usage.output_tokens = GetCount(u, "output_tokens", usage.output_tokens);
  usage.reasoning_tokens =
      GetCount(JsonField(u, "output_tokens_details"), "thinking_tokens", usage.reasoning_tokens);
}

HttpRequest Build(const ChatRequest& request, const Endpoint& endpoint, bool stream) {
  const ModelInfo& model = *endpoint.model;
  int max_tokens = request.max_output_tokens.value_or(
      model.default_output_tokens > 0 ? static_cast<int>(model.default_output_tokens)
                                      : kFallbackMaxTokens);
  Json body = {{"model", model.name}, {"max_tokens", max_tokens}};
  if (!request.system.empty()) body["system"] = request.system;
  Json messages = Json::array();
  for (const Message& m : request.messages) {
    messages.push_back({{"role", IsAssistant(m) ? "assistant" : "user"}, {"content", m.text}});
  }
  body["messages"] = std::move(messages);
  if (request.temperature) body["temperature"] = *request.temperature;
  if (request.top_p) body["top_p"] = *request.top_p;
  if (!request.stop.empty()) body["stop_sequences"] = request.stop;
  if (model.reasoning == ReasoningStyle::kAdaptive) {
    // Adaptive-only models (Opus 4.7) take an effort instead of a budget.
    if (request.reasoning_effort || request.thinking_budget_tokens)
      body["thinking"] = {{"type", "adaptive"}};
    if (request.reasoning_effort) body["output_config"] = {{"effort", *request.reasoning_effort}};
  } else if (request.thinking_budget_tokens) {
    body["thinking"] = {{"type", "enabled"}, {"budget_tokens", *request.thinking_budget_tokens}};
  }
  if (stream) body["stream"] = true;
  HttpRequest http;
  http.url = endpoint.base_url + "/v1/messages";
  http.headers.emplace_back("content-type", "application/json");
  http.headers.emplace_back("anthropic-version", kApiVersion);
  if (!endpoint.api_key.empty()) http.headers.emplace_back("x-api-key", endpoint.api_key);
  http.body = body.dump();
  return http;
}

Result<ChatResponse> Parse(std::string_view text) {
  KF_ASSIGN_OR_RETURN(Json j, ParseBody(text, "messages body"));
  if (JsonString(j, "type") == "error") return ClassifyStreamError(text).status;
  ChatResponse r;
  r.request_id = JsonString(j, "id");
  r.model = JsonString(j, "model");
  int64_t uncached = 0;
  MergeUsage(JsonField(j, "usage"), r.usage, uncached);
  r.finish = MapStop(JsonString(j, "stop_reason"));
  const Json& content = JsonField(j, "content");
  if (content.is_array()) {
    for (const Json& block : content) {
      std::string type = JsonString(block, "type");
      if (type == "text") r.text += JsonString(block, "text");
      if (type == "thinking") r.reasoning += JsonString(block, "thinking");
    }
  }
  return r;
}

// message_start → content_block_* → message_delta → message_stop; ping at any
// time; `event: error` may follow a 200. Payloads carry trailing spaces in the
// real stream, which the JSON parser skips.
class Decoder final : public StreamDecoder {
 public:
  std::optional<ProviderError> OnEvent(std::string_view event, std::string_view data) override {
    Json j = Json::parse(data, nullptr, false);
    if (j.is_discarded())
      return ProviderError{
          Error(ErrorKind::kServerError,
                fmt::format("malformed JSON in messages stream: '{}'", Utf8Prefix(data, 200)))};
    std::string type = JsonString(j, "type", std::string(event));
    if (type == "message_start") {
      const Json& m = JsonField(j, "message");
      response_.request_id = JsonString(m, "id");
      response_.model = JsonString(m, "model");
      MergeUsage(JsonField(m, "usage"), response_.usage, uncached_);
    } else if (type == "content_block_delta") {
      const Json& d = JsonField(j, "delta");
      std::string dt = JsonString(d, "type");
      if (dt == "text_delta") EmitText(JsonString(d, "text"));
      if (dt == "thinking_delta") response_.reasoning += JsonString(d, "thinking");
    } else if (type == "message_delta") {
      if (std::string s = JsonString(JsonField(j, "delta"), "stop_reason"); !s.empty())
        response_.finish = MapStop(s);
      MergeUsage(JsonField(j, "usage"), response_.usage, uncached_);
    } else if (type == "message_stop") {
      done_ = true;
    } else if (type == "error") {
      return ClassifyStreamError(data);
    }
    return std::nullopt;
  }
  bool Done() const override { return done_; }

 private:
  bool done_ = false;
  int64_t uncached_ = 0;
};

std::unique_ptr<StreamDecoder> MakeDecoder() { return std::make_unique<Decoder>(); }

}  // namespace

extern const Adapter kAnthropicAdapter = {WireFormat::kAnthropic, Build, Parse, MakeDecoder};

}  // namespace kforge::providers
