// libcurl transport. Uses the multi interface with short polls so that the
// total and the idle (longest-silence) deadlines are enforced to within tens
// of milliseconds; CURLOPT_LOW_SPEED_TIME only has one-second granularity.
#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <mutex>

#include "kforge/core/strings.h"
#include "kforge/providers/transport.h"

namespace kforge::providers {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct Transfer {
  const std::function<void(const HttpResponseHead&)>* on_head;
  const std::function<bool(std::string_view)>* on_body;
  HttpResponseHead head;
  bool head_sent = false;
  bool aborted = false;
  bool any_byte = false;
  SteadyClock::time_point last_byte;
  CURL* easy = nullptr;
};

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(data, size * n);
  t->last_byte = SteadyClock::now();
  t->any_byte = true;
  if (line.substr(0, 5) == "HTTP/") {
    t->head.headers.clear();  // a new response (after 100 Continue or a redirect)
    return size * n;
  }
  size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    t->head.headers[Lower(std::string(line.substr(0, colon)))] = Trim(line.substr(colon + 1));
  }
  return size * n;
}

void SendHead(Transfer* t) {
  if (t->head_sent) return;
  long code = 0;
  curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
  t->head.status = static_cast<int>(code);
  t->head_sent = true;
  if (*t->on_head) (*t->on_head)(t->head);
}

size_t OnWrite(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  t->last_byte = SteadyClock::now();
  t->any_byte = true;
  SendHead(t);
  if (*t->on_body && !(*t->on_body)(std::string_view(data, size * n))) {
    t->aborted = true;
    return 0;  // makes curl stop with CURLE_WRITE_ERROR
  }
  return size * n;
}

class Curl final : public HttpTransport {
 public:
  Curl() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  }

  Result<HttpResponseHead> Post(const HttpRequest& request,
                                const std::function<void(const HttpResponseHead&)>& on_head,
                                const std::function<bool(std::string_view)>& on_body) override {
    CURL* easy = curl_easy_init();
    CURLM* multi = curl_multi_init();
    if (!easy || !multi) {
      if (easy) curl_easy_cleanup(easy);
      if (multi) curl_multi_cleanup(multi);
      return Error(ErrorKind::kInternal, "curl initialisation failed");
    }
    Transfer t{&on_head, &on_body};
    t.easy = easy;
    curl_slist* headers = nullptr;
    for (const auto& [k, v] : request.headers)
      headers = curl_slist_append(headers, (k + ": " + v).c_str());
    headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(easy, CURLOPT_URL, request.url.c_str());
    curl_easy_setopt(easy, CURLOPT_POST, 1L);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request.body.size()));
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, OnWrite);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(request.connect_timeout.count()));
    curl_easy_setopt(easy, CURLOPT_ACCEPT_ENCODING, "");  // let curl decode gzip
    // Idle proxies drop silent connections; keep-alive probes keep long
    // thinking phases alive (the Anthropic SDK sets the same).
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPIDLE, 60L);
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPINTVL, 60L);
    // A corporate proxy's CA bundle: SSL_CERT_FILE / SSL_CERT_DIR as OpenSSL,
    // Python's ssl and the official SDKs read them (libcurl itself does not).
    if (const char* f = std::getenv("SSL_CERT_FILE"); f && *f)
      curl_easy_setopt(easy, CURLOPT_CAINFO, f);
    if (const char* d = std::getenv("SSL_CERT_DIR"); d && *d)
      curl_easy_setopt(easy, CURLOPT_CAPATH, d);
    curl_multi_add_handle(multi, easy);

    const auto start = SteadyClock::now();
    t.last_byte = start;
    Status failure;
    CURLcode done_code = CURLE_OK;
    bool finished = false;
    while (!finished) {
      int running = 0;
      curl_multi_perform(multi, &running);
      int left = 0;
      while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
        if (msg->msg == CURLMSG_DONE) {
          done_code = msg->data.result;
          finished = true;
        }
      }
      if (finished || running == 0) {
        finished = true;
        break;
      }
      const auto now = SteadyClock::now();
      if (now - start > request.total_timeout) {
        failure = Error(ErrorKind::kTimeout,
                        fmt::format("no complete answer within the total deadline of {:.1f} s",
                                    request.total_timeout.count() / 1000.0));
        break;
      }
      if (t.any_byte && now - t.last_byte > request.idle_timeout) {
        failure =
            Error(ErrorKind::kTimeout, fmt::format("the stream was silent for more than {:.1f} s",
                                                   request.idle_timeout.count() / 1000.0));
        break;
      }
      curl_multi_poll(multi, nullptr, 0, 20, nullptr);
    }
    if (failure.ok() && finished && done_code != CURLE_OK) {
      std::string detail = errbuf[0] ? errbuf : curl_easy_strerror(done_code);
      if (t.aborted) {
        failure = Error(ErrorKind::kCancelled, "the response was abandoned by its reader");
      } else if (done_code == CURLE_OPERATION_TIMEDOUT) {
        failure = Error(ErrorKind::kTimeout, fmt::format("{} ({})", detail, request.url));
      } else {
        failure = Error(ErrorKind::kTransport, fmt::format("{} ({})", detail, request.url));
      }
    }
    if (failure.ok()) SendHead(&t);
    curl_multi_remove_handle(multi, easy);
    curl_easy_cleanup(easy);
    curl_multi_cleanup(multi);
    curl_slist_free_all(headers);
    if (!failure.ok()) return failure;
    return t.head;
  }
};

}  // namespace

HttpTransport& CurlTransport() {
  static Curl* transport = new Curl();
  return *transport;
}

}  // namespace kforge::providers
