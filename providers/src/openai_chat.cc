// OpenAI Chat Completions, also spoken by Together, OpenRouter, vLLM, SGLang,
// Ollama and llama.cpp server. Field names follow the wire (research notes §1, §6).
#include <fmt/format.h>

#include "adapter.h"
#include "json_util.h"

namespace kforge::providers {
namespace {

FinishReason MapFinish(const std::string& r) {
  if (r == "stop" || r == "tool_calls" || r == "function_call") return FinishReason::kStop;
  if (r == "length") return FinishReason::kLength;
  if (r == "content_filter") return FinishReason::kContentFilter;
  if (r == "error") return FinishReason::kError;
  return FinishReason::kOther;
}

// prompt_tokens includes cached tokens and completion_tokens includes
// reasoning tokens, which is already our normal form; every *_details object
// may be missing (Ollama, 2024 responses).
Usage ParseUsage(const Json& u) {
  Usage usage;
  usage.input_tokens = GetCount(u, "prompt_tokens");
  usage.cached_input_tokens = GetCount(JsonField(u, "prompt_tokens_details"), "cached_tokens");
  usage.output_tokens = GetCount(u, "completion_tokens");
  usage.reasoning_tokens = GetCount(JsonField(u, "completion_tokens_details"), "reasoning_tokens");
  return usage;
}

// vLLM renamed reasoning_content to reasoning (PR #27752); llama.cpp kept the
// DeepSeek name. Read both.
std::string ReasoningOf(const Json& m) {
  std::string r = JsonString(m, "reasoning");
  return r.empty() ? JsonString(m, "reasoning_content") : r;
}

HttpRequest Build(const ChatRequest& request, const Endpoint& endpoint, bool stream) {
  const ModelInfo& model = *endpoint.model;
  Json body = {{"model", model.name}};
  Json messages = Json::array();
  if (!request.system.empty())
    messages.push_back({{"role", "system"}, {"content", request.system}});
  for (const Message& m : request.messages) {
    messages.push_back({{"role", IsAssistant(m) ? "assistant" : "user"}, {"content", m.text}});
  }
  body["messages"] = std::move(messages);
  if (request.max_output_tokens) {
    // OpenAI deprecated max_tokens and reasoning models reject it (fixture
    // openai_400_unsupported_max_tokens.json); most compat servers know only max_tokens.
    bool completion_name = endpoint.provider->name == "openai" || model.Rejects("max_tokens");
    body[completion_name ? "max_completion_tokens" : "max_tokens"] = *request.max_output_tokens;
  }
  if (request.temperature) body["temperature"] = *request.temperature;
  if (request.top_p) body["top_p"] = *request.top_p;
  if (request.seed) body["seed"] = *request.seed;
  if (!request.stop.empty()) body["stop"] = request.stop;
  if (request.reasoning_effort) body["reasoning_effort"] = *request.reasoning_effort;
  if (stream) {
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};  // else no usage arrives at all
  }
  HttpRequest http;
  http.url = endpoint.base_url + "/chat/completions";
  http.headers.emplace_back("Content-Type", "application/json");
  if (!endpoint.api_key.empty())
    http.headers.emplace_back("Authorization", "Bearer " + endpoint.api_key);
  http.body = body.dump();
  return http;
}

Result<ChatResponse> Parse(std::string_view text) {
  KF_ASSIGN_OR_RETURN(Json j, ParseBody(text, "chat completion"));
  ChatResponse r;
  r.request_id = JsonString(j, "id");
  r.model = JsonString(j, "model");
  r.usage = ParseUsage(JsonField(j, "usage"));
  const Json& choices = JsonField(j, "choices");
  if (!choices.is_array() || choices.empty()) {
    return Error(ErrorKind::kServerError,
                 fmt::format("chat completion without choices: '{}'", Utf8Prefix(text, 200)));
  }
  const Json& message = JsonField(choices[0], "message");
  r.text = JsonString(message, "content");
  r.reasoning = ReasoningOf(message);
  r.finish = MapFinish(JsonString(choices[0], "finish_reason"));
  if (r.text.empty() && !JsonString(message, "refusal").empty()) {
    r.text = JsonString(message, "refusal");
    r.finish = FinishReason::kContentFilter;
  }
  return r;
}

// data: chunks end with data: [DONE]; with include_usage a last chunk has
// "choices": [] and the usage. Any chunk with an "error" key is an error even
// though the status was 200 (openai-python _streaming.py).
class Decoder final : public StreamDecoder {
 public:
  std::optional<ProviderError> OnEvent(std::string_view, std::string_view data) override {
    if (data == "[DONE]") {
      done_ = true;
      return std::nullopt;
    }
    Json j = Json::parse(data, nullptr, false);
    if (j.is_discarded())
      return ProviderError{
          Error(ErrorKind::kServerError,
                fmt::format("malformed JSON in chat stream: '{}'", Utf8Prefix(data, 200)))};
    if (JsonHas(j, "error") || JsonString(j, "object") == "error") return ClassifyStreamError(data);
    if (response_.request_id.empty()) response_.request_id = JsonString(j, "id");
    if (response_.model.empty()) response_.model = JsonString(j, "model");
    if (JsonField(j, "usage").is_object()) response_.usage = ParseUsage(JsonField(j, "usage"));
    const Json& choices = JsonField(j, "choices");
    if (choices.is_array() && !choices.empty()) {
      const Json& delta = JsonField(choices[0], "delta");
      response_.reasoning += ReasoningOf(delta);
      EmitText(JsonString(delta, "content"));
      if (std::string f = JsonString(choices[0], "finish_reason"); !f.empty())
        response_.finish = MapFinish(f);
    }
    return std::nullopt;
  }
  bool Done() const override { return done_; }

 private:
  bool done_ = false;
};

std::unique_ptr<StreamDecoder> MakeDecoder() { return std::make_unique<Decoder>(); }

}  // namespace

extern const Adapter kOpenAiChatAdapter = {WireFormat::kOpenAiChat, Build, Parse, MakeDecoder};

}  // namespace kforge::providers
