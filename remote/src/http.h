// Internal: one HTTP request over libcurl, the client side of the
// eval-server. The token travels in a header and appears in no message.
#pragma once

#include <functional>
#include <string>

#include "kforge/core/status.h"

namespace kforge::remote {

struct HttpCall {
  std::string method = "GET";  // GET | POST
  std::string url;
  std::string token;  // sent as Authorization: Bearer
  std::string body;   // POST only, JSON
  double connect_timeout_s = 10;
  double total_timeout_s = 60;
  size_t max_response_bytes = 256 << 20;
  // Asked about once a second while the call is in flight; false abandons
  // it (kCancelled).
  std::function<bool()> keep_going;
};

struct HttpReply {
  int status = 0;
  std::string body;
  std::string retry_after;  // the Retry-After header, verbatim; empty if none
};

// kTransport when the connection failed or broke before the whole answer
// arrived (a server that died mid-job), kTimeout when a deadline passed,
// kCancelled when keep_going said stop.
// An HTTP error status is a reply, not an error.
Result<HttpReply> Send(const HttpCall& call);

}  // namespace kforge::remote
