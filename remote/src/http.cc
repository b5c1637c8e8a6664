#include "http.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <mutex>

namespace kforge::remote {
namespace {

struct Sink {
  HttpReply* reply;
  size_t max;
  bool overflow = false;
};

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t bytes = size * n;
  if (sink->reply->body.size() + bytes > sink->max) {
    sink->overflow = true;
    return 0;  // aborts the transfer
  }
  sink->reply->body.append(data, bytes);
  return bytes;
}

// Header lines arrive one at a time, "Name: value\r\n".
size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* reply = static_cast<HttpReply*>(user);
  const size_t bytes = size * n;
  std::string_view line(data, bytes);
  constexpr std::string_view kName = "retry-after:";
  if (line.size() > kName.size()) {
    bool match = true;
    for (size_t i = 0; i < kName.size() && match; ++i) {
      char c = line[i];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      match = c == kName[i];
    }
    if (match) {
      std::string_view v = line.substr(kName.size());
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
      while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' '))
        v.remove_suffix(1);
      reply->retry_after = std::string(v.substr(0, 64));
    }
  }
  return bytes;
}

// curl's progress callback: non-zero aborts the transfer.
int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* keep_going = static_cast<const std::function<bool()>*>(user);
  return (*keep_going)() ? 0 : 1;
}

}  // namespace

Result<HttpReply> Send(const HttpCall& call) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURL* easy = curl_easy_init();
  if (!easy) return Error(ErrorKind::kInternal, "curl_easy_init failed");
  HttpReply reply;
  Sink sink{&reply, call.max_response_bytes};
  curl_slist* headers = nullptr;
  const std::string auth = "Authorization: Bearer " + call.token;
  if (!call.token.empty()) headers = curl_slist_append(headers, auth.c_str());
  headers = curl_slist_append(headers, "Accept: application/json");
  curl_easy_setopt(easy, CURLOPT_URL, call.url.c_str());
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(call.connect_timeout_s * 1000));
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(call.total_timeout_s * 1000));
  // A job may run for minutes with nothing on the wire: keepalive probes
  // notice a peer that vanished (a node that lost power) long before the
  // total timeout would.
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPIDLE, 30L);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPINTVL, 10L);
  if (call.method == "POST") {
    headers = curl_slist_append(headers, "Content-Type: application/json");
    curl_easy_setopt(easy, CURLOPT_POST, 1L);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, call.body.data());
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(call.body.size()));
    // No "Expect: 100-continue" round trip: a refusal comes back either way.
    headers = curl_slist_append(headers, "Expect:");
  }
  if (call.keep_going) {
    curl_easy_setopt(easy, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(easy, CURLOPT_XFERINFOFUNCTION, OnProgress);
    curl_easy_setopt(easy, CURLOPT_XFERINFODATA, &call.keep_going);
  }
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(easy, CURLOPT_HEADERDATA, &reply);
  const CURLcode rc = curl_easy_perform(easy);
  long status = 0;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(easy);
  reply.status = static_cast<int>(status);
  if (sink.overflow) {
    return Error(ErrorKind::kTransport,
                 fmt::format("{} {}: the answer is over {} bytes", call.method, call.url,
                             call.max_response_bytes));
  }
  if (rc == CURLE_ABORTED_BY_CALLBACK) {
    return Error(ErrorKind::kCancelled, fmt::format("{} {}: abandoned", call.method, call.url));
  }
  if (rc == CURLE_OPERATION_TIMEDOUT) {
    return Error(ErrorKind::kTimeout, fmt::format("{} {}: no complete answer within {:.0f} s",
                                                  call.method, call.url, call.total_timeout_s));
  }
  if (rc != CURLE_OK) {
    return Error(ErrorKind::kTransport,
                 fmt::format("{} {}: {}", call.method, call.url, curl_easy_strerror(rc)));
  }
  return reply;
}

}  // namespace kforge::remote
