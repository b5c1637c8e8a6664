// The HTTP seam. The real implementation uses libcurl; tests may substitute
// their own. Requests are always POSTs of a JSON body.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::providers {

struct HttpRequest {
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds total_timeout{600000};
  std::chrono::milliseconds idle_timeout{120000};  // longest gap between received bytes
};

struct HttpResponseHead {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  // Sends the request. `on_head` runs once when the status line and headers
  // have arrived; `on_body` runs for each piece of the body as it arrives and
  // may return false to abort. Returns the head when the body ended cleanly;
  // kTimeout when a deadline passed, kTransport when the connection failed or
  // was cut, kCancelled when a callback aborted.
  virtual Result<HttpResponseHead> Post(const HttpRequest& request,
                                        const std::function<void(const HttpResponseHead&)>& on_head,
                                        const std::function<bool(std::string_view)>& on_body) = 0;
};

// The libcurl transport. Thread-safe; each call uses its own handle.
HttpTransport& CurlTransport();

}  // namespace kforge::providers
