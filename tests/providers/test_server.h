// A scripted HTTP server on 127.0.0.1 for provider tests. Each request gets
// the next scripted reply; the server records what it was sent.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace kforge::providers::testing {

struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::map<std::string, std::string> headers;
  size_t piece = 0;       // >0: send the body chunked in pieces of this size
  long cut_after = -1;    // >=0: after this many bytes, drop the connection (reset)
  long stall_after = -1;  // >=0: after this many bytes, go silent until the test ends
};

struct Received {
  std::string path, body;
  httplib::Headers headers;
};

class TestServer {
 public:
  TestServer() {
    server_.Post(".*",
                 [this](const httplib::Request& req, httplib::Response& res) { Handle(req, res); });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::yield();
  }
  ~TestServer() {
    {
      std::lock_guard lock(mu_);
      releasing_ = true;
    }
    cv_.notify_all();
    server_.stop();
    thread_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void Push(Reply r) {
    std::lock_guard lock(mu_);
    replies_.push_back(std::move(r));
  }
  // The reply for every request once the scripted ones are used up (without
  // one: a 500 saying there is no scripted reply).
  void SetDefault(Reply r) {
    std::lock_guard lock(mu_);
    default_ = std::move(r);
  }
  std::vector<Received> received() {
    std::lock_guard lock(mu_);
    return received_;
  }
  size_t count() {
    std::lock_guard lock(mu_);
    return received_.size();
  }

 private:
  void Handle(const httplib::Request& req, httplib::Response& res) {
    Reply r;
    {
      std::lock_guard lock(mu_);
      received_.push_back(
          {req.path + (req.params.empty() ? "" : "?alt=" + req.get_param_value("alt")), req.body,
           req.headers});
      if (replies_.empty() && default_) replies_.push_back(*default_);
      if (replies_.empty()) {
        res.status = 500;
        res.set_content(R"({"error":{"message":"no scripted reply","type":"server_error"}})",
                        "application/json");
        return;
      }
      r = std::move(replies_.front());
      replies_.pop_front();
    }
    res.status = r.status;
    for (const auto& [k, v] : r.headers) res.set_header(k.c_str(), v.c_str());
    if (r.piece == 0 && r.cut_after < 0 && r.stall_after < 0) {
      res.set_content(r.body, r.content_type.c_str());
      return;
    }
    size_t piece = r.piece ? r.piece : 64;
    auto reply = std::make_shared<Reply>(std::move(r));
    res.set_chunked_content_provider(
        reply->content_type.c_str(), [this, reply, piece](size_t offset, httplib::DataSink& sink) {
          const std::string& b = reply->body;
          size_t limit = b.size();
          if (reply->cut_after >= 0) limit = std::min(limit, static_cast<size_t>(reply->cut_after));
          if (reply->stall_after >= 0)
            limit = std::min(limit, static_cast<size_t>(reply->stall_after));
          if (offset < limit) {
            size_t n = std::min(piece, limit - offset);
            sink.write(b.data() + offset, n);
            return true;
          }
          if (reply->stall_after >= 0) {
            std::unique_lock lock(mu_);
            cv_.wait_for(lock, std::chrono::seconds(20), [this] { return releasing_; });
            return false;
          }
          if (reply->cut_after >= 0) return false;  // abort: no terminating chunk
          sink.done();
          return true;
        });
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool releasing_ = false;
  std::deque<Reply> replies_;
  std::optional<Reply> default_;
  std::vector<Received> received_;
};

}  // namespace kforge::providers::testing
