// OpenAI Responses API (research notes §2). The stream is typed: exactly one
// of response.completed / .incomplete / .failed ends it, possibly after an
// `error` event, and a failure can arrive after HTTP 200.
#include <fmt/format.h>

#include "adapter.h"
#include "json_util.h"

namespace kforge::providers {
namespace {

Usage ParseUsage(const Json& u) {
  Usage usage;
  usage.input_tokens = GetCount(u, "input_tokens");  // includes cached
  usage.cached_input_tokens = GetCount(JsonField(u, "input_tokens_details"), "cached_tokens");
  usage.output_tokens = GetCount(u, "output_tokens");  // includes reasoning
  usage.reasoning_tokens = GetCount(JsonField(u, "output_tokens_details"), "reasoning_tokens");
  return usage;
}

FinishReason FinishOf(const Json& response) {
  std::string status = JsonString(response, "status");
  if (status == "completed") return FinishReason::kStop;
  if (status == "incomplete") {
    std::string reason = JsonString(JsonField(response, "incomplete_details"), "reason");
    if (reason == "max_output_tokens") return FinishReason::kLength;
    if (reason == "content_filter") return FinishReason::kContentFilter;
  }
  if (status == "failed") return FinishReason::kError;
  return FinishReason::kOther;
}

// Fills everything but the text from a full response object.
void FillFromResponse(const Json& response, ChatResponse& r) {
  r.request_id = JsonString(response, "id", r.request_id);
  r.model = JsonString(response, "model", r.model);
  if (JsonField(response, "usage").is_object()) r.usage = ParseUsage(JsonField(response, "usage"));
  r.finish = FinishOf(response);
}

HttpRequest Build(const ChatRequest& request, const Endpoint& endpoint, bool stream) {
  Json body = {{"model", endpoint.model->name},
               {"store", false}};  // the server default is store:true
  if (!request.system.empty()) body["instructions"] = request.system;
  Json input = Json::array();
  for (const Message& m : request.messages) {
    input.push_back({{"role", IsAssistant(m) ? "assistant" : "user"}, {"content", m.text}});
  }
  body["input"] = std::move(input);
  if (request.max_output_tokens) body["max_output_tokens"] = *request.max_output_tokens;
  if (request.temperature) body["temperature"] = *request.temperature;
  if (request.top_p) body["top_p"] = *request.top_p;
  if (request.reasoning_effort) body["reasoning"] = {{"effort", *request.reasoning_effort}};
  // The Responses API has no stop sequences and no seed; the client drops them.
  if (stream) body["stream"] = true;
  HttpRequest http;
  http.url = endpoint.base_url + "/responses";
  http.headers.emplace_back("Content-Type", "application/json");
  if (!endpoint.api_key.empty())
    http.headers.emplace_back("Authorization", "Bearer " + endpoint.api_key);
  http.body = body.dump();
  return http;
}

Result<ChatResponse> Parse(std::string_view text) {
  KF_ASSIGN_OR_RETURN(Json j, ParseBody(text, "responses body"));
  if (JsonString(j, "status") == "failed") return ClassifyStreamError(text).status;
  ChatResponse r;
  FillFromResponse(j, r);
  // output_text is computed by the SDKs, not sent: join every output_text part.
  const Json& output = JsonField(j, "output");
  if (output.is_array()) {
    for (const Json& item : output) {
      const Json& content = JsonField(item, "content");
      std::string type = JsonString(item, "type");
      if (type == "reasoning") {
        for (const Json& s :
             JsonField(item, "summary").is_array() ? JsonField(item, "summary") : Json::array()) {
          r.reasoning += JsonString(s, "text");
        }
      }
      if (type != "message" || !content.is_array()) continue;
      for (const Json& part : content) {
        if (JsonString(part, "type") == "output_text") r.text += JsonString(part, "text");
        if (JsonString(part, "type") == "refusal") {
          r.text += JsonString(part, "refusal");
          r.finish = FinishReason::kContentFilter;
        }
      }
    }
  }
  return r;
}

class Decoder final : public StreamDecoder {
 public:
  std::optional<ProviderError> OnEvent(std::string_view event, std::string_view data) override {
    Json j = Json::parse(data, nullptr, false);
    if (j.is_discarded())
      return ProviderError{
          Error(ErrorKind::kServerError,
                fmt::format("malformed JSON in responses stream: '{}'", Utf8Prefix(data, 200)))};
    std::string type = JsonString(j, "type", std::string(event));
    if (type == "response.output_text.delta") {
      EmitText(JsonString(j, "delta"));
    } else if (type == "response.reasoning_summary_text.delta" ||
               type == "response.reasoning_text.delta") {
      response_.reasoning += JsonString(j, "delta");
    } else if (type == "response.created" || type == "response.in_progress") {
      FillFromResponse(JsonField(j, "response"), response_);
      response_.finish = FinishReason::kStop;
    } else if (type == "response.completed" || type == "response.incomplete") {
      FillFromResponse(JsonField(j, "response"), response_);
      done_ = true;
    } else if (type == "error" || type == "response.failed") {
      done_ = true;
      return ClassifyStreamError(data);
    }
    return std::nullopt;
  }
  bool Done() const override { return done_; }

 private:
  bool done_ = false;
};

std::unique_ptr<StreamDecoder> MakeDecoder() { return std::make_unique<Decoder>(); }

}  // namespace

extern const Adapter kOpenAiResponsesAdapter = {WireFormat::kOpenAiResponses, Build, Parse,
                                                MakeDecoder};

}  // namespace kforge::providers
