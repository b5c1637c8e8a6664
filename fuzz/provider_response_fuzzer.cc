// Provider response parsing (providers/src): a body from the network is
// outside input. Each input is fed to every wire format as a whole 200 body,
// as a text/event-stream split in two at a point the input picks, and as an
// error body, plus Gemini's JSON sequence framing; all must end as a value or
// an error whose message is UTF-8, and a split stream must decode like the
// whole one.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "adapter.h"
#include "errors.h"
#include "sse.h"

namespace {

using namespace kforge::providers;

// A message is stored as JSON (run events, results): it must be UTF-8 whatever
// bytes the provider sent, or serialising it throws.
void CheckMessage(const kforge::Status& status) {
  try {
    (void)nlohmann::json(status.message()).dump();
  } catch (const nlohmann::json::exception&) {
    std::abort();
  }
}

struct Decoded {
  std::string text, streamed;
  bool error = false, done = false;
};

Decoded DecodeSse(WireFormat wire, std::string_view body, size_t cut) {
  Decoded out;
  std::unique_ptr<StreamDecoder> decoder = AdapterFor(wire).make_decoder();
  TextCallback cb = [&](std::string_view d) { out.streamed.append(d); };
  decoder->SetTextCallback(&cb);
  SseParser sse;
  auto sink = [&](const SseEvent& ev) {
    if (out.error) return;
    std::optional<ProviderError> e = decoder->OnEvent(ev.event, ev.data);
    if (e) CheckMessage(e->status);
    out.error = e.has_value();
  };
  sse.Feed(body.substr(0, cut), sink);
  sse.Feed(body.substr(cut), sink);
  sse.Finish(sink);
  (void)sse.HasPartialEvent();
  out.done = decoder->Done();
  out.text = decoder->response().text;
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  size_t cut = size == 0 ? 0 : (data[0] * 131u + (size > 1 ? data[size - 1] : 0)) % (size + 1);
  for (WireFormat wire : {WireFormat::kOpenAiChat, WireFormat::kOpenAiResponses,
                          WireFormat::kAnthropic, WireFormat::kGemini}) {
    kforge::Result<ChatResponse> parsed = AdapterFor(wire).parse(body);
    if (!parsed.ok()) CheckMessage(parsed.status());
    Decoded whole = DecodeSse(wire, body, 0), split = DecodeSse(wire, body, cut);
    if (whole.text != split.text || whole.streamed != split.streamed ||
        whole.error != split.error || whole.done != split.done) {
      std::abort();  // a stream's meaning may not depend on where the bytes were cut
    }
  }
  JsonSequenceParser sequence;
  std::unique_ptr<StreamDecoder> gemini = AdapterFor(WireFormat::kGemini).make_decoder();
  auto sink = [&](std::string_view object) {
    if (std::optional<ProviderError> e = gemini->OnEvent("message", object))
      CheckMessage(e->status);
  };
  sequence.Feed(body.substr(0, cut), sink);
  sequence.Feed(body.substr(cut), sink);
  (void)sequence.HasPartialObject();

  kforge::providers::HttpResponseHead head;
  head.status = size == 0 ? 500 : 300 + data[0] * 2 % 300;
  head.headers = {{"retry-after", std::string(body.substr(0, 40))},
                  {"retry-after-ms", std::string(body.substr(size / 2, 20))},
                  {"x-should-retry", std::string(body.substr(0, 5))}};
  ProviderError http = ClassifyHttpError("fuzz", head, body);
  ProviderError stream = ClassifyStreamError(body);
  for (const ProviderError* e : {&http, &stream}) {
    if (e->status.ok()) std::abort();
    CheckMessage(e->status);
    if (e->retry_after && e->retry_after->count() < 0) std::abort();
  }
  (void)ParseDurationText(body.substr(0, 64));
  // What Redact returns holds nothing key-shaped any more.
  std::string redacted = Redact(std::string(body), body.substr(0, 12));
  if (Redact(redacted, "") != redacted) std::abort();
  return 0;
}
