// One adapter per wire format, registered in one table (adapters.cc). An
// adapter builds the HTTP request, parses a whole response, decodes a stream
// event by event and pulls the error details out of an error body. Provider
// quirks live in the adapter for that wire format and nowhere else.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "errors.h"
#include "kforge/providers/client.h"
#include "kforge/providers/registry.h"
#include "kforge/providers/transport.h"

namespace kforge::providers {

struct Endpoint {
  const ProviderInfo* provider = nullptr;
  const ModelInfo* model = nullptr;
  std::string base_url;  // no trailing slash
  std::string api_key;   // may be empty for keyless compat servers
};

// Turns a stream's events into a response. OnEvent returns an error when the
// stream carries one (an error inside a 200 stream) or a payload is malformed.
class StreamDecoder {
 public:
  virtual ~StreamDecoder() = default;
  virtual std::optional<ProviderError> OnEvent(std::string_view event, std::string_view data) = 0;
  // True once the wire format's terminal marker was seen.
  virtual bool Done() const = 0;
  ChatResponse& response() { return response_; }

 protected:
  // Appends visible text and forwards it to the caller's callback.
  void EmitText(std::string_view delta) {
    if (delta.empty()) return;
    response_.text.append(delta);
    if (on_text_ && *on_text_) (*on_text_)(delta);
  }
  ChatResponse response_;
  const TextCallback* on_text_ = nullptr;

 public:
  void SetTextCallback(const TextCallback* cb) { on_text_ = cb; }
};

struct Adapter {
  WireFormat wire;
  // The request as this wire format spells it. Parameters the model rejects
  // are already removed from `request` by the client.
  HttpRequest (*build)(const ChatRequest& request, const Endpoint& endpoint, bool stream);
  // A whole (non-streaming) 200 body.
  Result<ChatResponse> (*parse)(std::string_view body);
  std::unique_ptr<StreamDecoder> (*make_decoder)();
};

const Adapter& AdapterFor(WireFormat wire);

// Shared by adapters: the roles each wire format calls "assistant".
inline bool IsAssistant(const Message& m) { return m.role == "assistant" || m.role == "model"; }

}  // namespace kforge::providers
