// Incremental parsers for the two streaming framings providers use.
//
// SseParser follows the WHATWG event-stream rules rather than any provider's
// shortcut: lines end in \n, \r\n or \r; a blank line dispatches; several
// data: lines join with \n; one space after the colon is dropped; lines
// starting with ':' are comments. Bytes may arrive split anywhere.
//
// JsonSequenceParser splits a stream of JSON objects (Gemini's
// streamGenerateContent without alt=sse sends one JSON array of responses, and
// a streaming call can answer with a single pretty-printed error object) by
// counting braces outside strings, as google-genai's _iter_response_stream does.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace kforge::providers {

struct SseEvent {
  std::string event;  // "message" when the stream names none
  std::string data;
};

class SseParser {
 public:
  using Sink = std::function<void(const SseEvent&)>;
  void Feed(std::string_view bytes, const Sink& sink);
  // At a clean end of the body: dispatches a last event that lacks its
  // closing blank line. The spec drops such an event, but recorded streams
  // end this way (anthropic_stream_max_tokens.sse ends right after
  // message_stop's data line) and the decoder still checks for the terminal
  // event, so a stream cut short is caught there.
  void Finish(const Sink& sink);
  // True when bytes of an undispatched event are pending (a cut stream).
  bool HasPartialEvent() const;

 private:
  void Line(std::string_view line, const Sink& sink);
  std::string line_;
  bool last_was_cr_ = false;
  std::string event_, data_;
  bool has_data_ = false;
  bool pending_ = false;
};

class JsonSequenceParser {
 public:
  using Sink = std::function<void(std::string_view object)>;
  void Feed(std::string_view bytes, const Sink& sink);
  bool HasPartialObject() const { return depth_ > 0; }

 private:
  std::string current_;
  int depth_ = 0;
  bool in_string_ = false;
  bool escape_ = false;
};

}  // namespace kforge::providers
