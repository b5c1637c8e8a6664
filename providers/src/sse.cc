#include "sse.h"

namespace kforge::providers {

void SseParser::Feed(std::string_view bytes, const Sink& sink) {
  for (char c : bytes) {
    if (c == '\n' && last_was_cr_) {  // the \n of a \r\n split or not
      last_was_cr_ = false;
      continue;
    }
    last_was_cr_ = (c == '\r');
    if (c == '\r' || c == '\n') {
      Line(line_, sink);
      line_.clear();
    } else {
      line_.push_back(c);
    }
  }
}

void SseParser::Finish(const Sink& sink) {
  if (!line_.empty()) {
    Line(line_, sink);
    line_.clear();
  }
  Line("", sink);
}

bool SseParser::HasPartialEvent() const { return pending_ || !line_.empty(); }

void SseParser::Line(std::string_view line, const Sink& sink) {
  if (line.empty()) {
    if (has_data_) sink(SseEvent{event_.empty() ? "message" : event_, data_});
    event_.clear();
    data_.clear();
    has_data_ = false;
    pending_ = false;
    return;
  }
  pending_ = true;
  if (line.front() == ':') return;  // comment (keep-alive)
  std::string_view field = line, value;
  if (size_t colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_.assign(value);
  }  // id and retry do not matter for one-shot requests
}

void JsonSequenceParser::Feed(std::string_view bytes, const Sink& sink) {
  for (char c : bytes) {
    if (depth_ == 0) {
      if (c != '{') continue;  // array brackets, commas, whitespace between objects
    }
    current_.push_back(c);
    if (in_string_) {
      if (escape_) {
        escape_ = false;
      } else if (c == '\\') {
        escape_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      continue;
    }
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{') {
      ++depth_;
    } else if (c == '}') {
      if (--depth_ == 0) {
        sink(current_);
        current_.clear();
      }
    }
  }
}

}  // namespace kforge::providers
