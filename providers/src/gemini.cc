// Google Gemini generateContent / streamGenerateContent?alt=sse (research notes §5).
#include <fmt/format.h>

#include <cctype>

#include "adapter.h"
#include "json_util.h"

namespace kforge::providers {
namespace {

FinishReason MapFinish(const std::string& r) {
  if (r == "STOP") return FinishReason::kStop;
  if (r == "MAX_TOKENS") return FinishReason::kLength;
  if (r == "SAFETY" || r == "RECITATION" || r == "BLOCKLIST" || r == "PROHIBITED_CONTENT" ||
      r == "SPII" || r == "IMAGE_SAFETY") {
    return FinishReason::kContentFilter;
  }
  return FinishReason::kOther;
}

// candidatesTokenCount excludes thoughts (total = prompt + candidates +
// thoughts, checked against gemini_ok.json), so output = candidates + thoughts.
Usage ParseUsage(const Json& u) {
  Usage usage;
  usage.input_tokens = GetCount(u, "promptTokenCount");
  usage.cached_input_tokens = GetCount(u, "cachedContentTokenCount");
  usage.reasoning_tokens = GetCount(u, "thoughtsTokenCount");
  usage.output_tokens = GetCount(u, "candidatesTokenCount") + usage.reasoning_tokens;
  return usage;
}

// Applies one GenerateContentResponse (a whole body or one stream chunk).
// Stream chunks repeat usageMetadata cumulatively: keep the last, never sum.
// Returns true when the chunk carried a finishReason or a prompt block.
bool Apply(const Json& j, ChatResponse& r, const std::function<void(std::string_view)>& emit) {
  if (std::string id = JsonString(j, "responseId"); !id.empty()) r.request_id = id;
  if (std::string mv = JsonString(j, "modelVersion"); !mv.empty()) r.model = mv;
  if (JsonField(j, "usageMetadata").is_object())
    r.usage = ParseUsage(JsonField(j, "usageMetadata"));
  const Json& candidates = JsonField(j, "candidates");
  if (!candidates.is_array() || candidates.empty()) {
    // A blocked prompt has no candidate, only promptFeedback.blockReason.
    if (!JsonString(JsonField(j, "promptFeedback"), "blockReason").empty()) {
      r.finish = FinishReason::kContentFilter;
      return true;
    }
    return false;
  }
  const Json& c = candidates[0];
  const Json& parts = JsonField(JsonField(c, "content"), "parts");
  if (parts.is_array()) {
    for (const Json& p : parts) {
      std::string text = JsonString(p, "text");
      if (JsonField(p, "thought").is_boolean() && JsonField(p, "thought").get<bool>()) {
        r.reasoning += text;
      } else {
        emit(text);
      }
    }
  }
  if (std::string f = JsonString(c, "finishReason"); !f.empty()) {
    r.finish = MapFinish(f);
    return true;
  }
  return false;
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

HttpRequest Build(const ChatRequest& request, const Endpoint& endpoint, bool stream) {
  const ModelInfo& model = *endpoint.model;
  Json body;
  if (!request.system.empty())
    body["systemInstruction"] = {{"parts", {{{"text", request.system}}}}};
  Json contents = Json::array();
  for (const Message& m : request.messages) {
    contents.push_back(
        {{"role", IsAssistant(m) ? "model" : "user"}, {"parts", {{{"text", m.text}}}}});
  }
  body["contents"] = std::move(contents);
  Json gen = Json::object();
  if (request.max_output_tokens) gen["maxOutputTokens"] = *request.max_output_tokens;
  if (request.temperature) gen["temperature"] = *request.temperature;
  if (request.top_p) gen["topP"] = *request.top_p;
  if (request.seed) gen["seed"] = *request.seed;
  if (!request.stop.empty()) gen["stopSequences"] = request.stop;
  // Sending both thinkingBudget and thinkingLevel is a 400 INVALID_ARGUMENT
  // (fixture gemini_400_invalid_argument.json): send exactly one.
  if (request.thinking_budget_tokens && model.reasoning != ReasoningStyle::kAdaptive) {
    gen["thinkingConfig"] = {{"thinkingBudget", *request.thinking_budget_tokens}};
  } else if (request.reasoning_effort) {
    gen["thinkingConfig"] = {{"thinkingLevel", Upper(*request.reasoning_effort)}};
  }
  if (!gen.empty()) body["generationConfig"] = std::move(gen);
  HttpRequest http;
  http.url = fmt::format("{}/v1beta/models/{}:{}", endpoint.base_url, model.name,
                         stream ? "streamGenerateContent?alt=sse" : "generateContent");
  http.headers.emplace_back("Content-Type", "application/json");
  if (!endpoint.api_key.empty()) http.headers.emplace_back("x-goog-api-key", endpoint.api_key);
  http.body = body.dump();
  return http;
}

Result<ChatResponse> Parse(std::string_view text) {
  KF_ASSIGN_OR_RETURN(Json j, ParseBody(text, "generateContent body"));
  if (JsonHas(j, "error")) return ClassifyStreamError(text).status;
  ChatResponse r;
  // Without alt=sse, streamGenerateContent answers with one array of responses.
  Json items = j.is_array() ? j : Json::array({j});
  for (const Json& item : items) {
    Apply(item, r, [&](std::string_view t) { r.text.append(t); });
  }
  return r;
}

// No terminal marker: the stream just closes after the chunk with finishReason.
class Decoder final : public StreamDecoder {
 public:
  std::optional<ProviderError> OnEvent(std::string_view, std::string_view data) override {
    Json j = Json::parse(data, nullptr, false);
    if (j.is_discarded())
      return ProviderError{
          Error(ErrorKind::kServerError,
                fmt::format("malformed JSON in Gemini stream: '{}'", Utf8Prefix(data, 200)))};
    if (JsonHas(j, "error")) return ClassifyStreamError(data);
    if (Apply(j, response_, [this](std::string_view t) { EmitText(t); })) done_ = true;
    return std::nullopt;
  }
  bool Done() const override { return done_; }

 private:
  bool done_ = false;
};

std::unique_ptr<StreamDecoder> MakeDecoder() { return std::make_unique<Decoder>(); }

}  // namespace

extern const Adapter kGeminiAdapter = {WireFormat::kGemini, Build, Parse, MakeDecoder};

}  // namespace kforge::providers
