// An in-process eval-server over fake slots, for the server's own tests: the
// slots answer from the job, and can hold every job at a gate until the
// test opens it, so queue and drain states are reached deterministically.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "http.h"
#include "kforge/remote/server.h"
#include "wire.h"

namespace kforge::remote::testing {

inline const std::string kToken = "test-token-0123456789abcdef";
inline const std::string kOtherToken = "other-token-0123456789abcdef";
inline const std::string kSuite = "suite-hash-A";

class Gate {
 public:
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // Called by a slot: counts the job as started, then waits for the gate.
  void Pass(const std::string& source) {
    std::unique_lock<std::mutex> lock(mu_);
    ++started_;
    ++seen_[source];
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
  }
  // Waits until `n` jobs have started (or 30 s passed); false on timeout.
  bool WaitStarted(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return started_ >= n; });
  }
  int started() const {
    std::lock_guard<std::mutex> lock(mu_);
    return started_;
  }
  std::map<std::string, int> seen() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int started_ = 0;
  std::map<std::string, int> seen_;
};

// Answers {"status":"compiled","message":SOURCE} after passing the gate; a
// job that asked for the profile gets a skipped one that says so, and one
// with a canary gets it back as `fake_slot_canary`.
class FakeSlot final : public eval::EvalService {
 public:
  explicit FakeSlot(Gate* gate) : gate_(gate) {}
  Result<nlohmann::json> Evaluate(const eval::EvalRequest& job) override {
    gate_->Pass(job.source);
    nlohmann::json doc = {{"schema", "kforge.eval/1"},
                          {"status", job.compile_only ? "compiled" : "passed"},
                          {"message", job.source},
                          {"task", job.task},
                          {"seconds", 0.001}};
    if (job.profile) doc["profile"] = {{"size", "1MiB"}, {"rank", 0}, {"skipped", "fake slot"}};
    if (!job.canary.empty()) doc["fake_slot_canary"] = job.canary;
    return doc;
  }

 private:
  Gate* gate_;
};

inline EvalServerOptions Options() {
  EvalServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.compile_slots = 1;
  o.max_queue = 8;
  o.per_token = 0;
  o.task_suite_hash = kSuite;
  o.tasks_dir = "tasks";
  o.task_keys = {"001_allreduce", "002_allgather"};
  return o;
}

// The server, running on a thread until Stop().
class TestServer {
 public:
  explicit TestServer(EvalServerOptions o, Gate* gate,
                      std::vector<std::string> tokens = {kToken, kOtherToken}) {
    auto set = TokenSet::FromTokens(tokens);
    EXPECT_TRUE(set.ok()) << set.status().ToString();
    auto s = EvalServer::Start(o, std::move(*set), [gate](const std::vector<int>&) {
      return std::make_unique<FakeSlot>(gate);
    });
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
    runner_ = std::thread([this] { result_ = server_->Run(); });
  }
  ~TestServer() {
    if (runner_.joinable()) {
      EXPECT_TRUE(Stop().ok());
    }
  }
  Status Stop() {
    server_->RequestDrain();
    runner_.join();
    return result_;
  }
  EvalServer& server() { return *server_; }
  std::string url() const { return server_->url(); }

 private:
  std::unique_ptr<EvalServer> server_;
  std::thread runner_;
  Status result_;
};

inline std::string JobBody(const std::string& source, bool compile_only = true,
                           const std::string& task = "001_allreduce",
                           const std::string& suite = kSuite) {
  wire::JobRequest r;
  r.job.task = task;
  r.job.source = source;
  r.job.kernel_name = "k.cu";
  r.job.world = 2;
  r.job.compile_only = compile_only;
  r.task_suite_hash = suite;
  r.kforge_version = kforge::Version();
  return wire::JobRequestJson(r).dump();
}

inline HttpReply Post(const std::string& url, const std::string& body,
                      const std::string& token = kToken) {
  HttpCall c;
  c.method = "POST";
  c.url = url + "/v1/evaluate";
  c.token = token;
  c.body = body;
  auto r = Send(c);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : HttpReply{};
}

inline HttpReply Get(const std::string& url, const std::string& path,
                     const std::string& token = kToken) {
  HttpCall c;
  c.url = url + path;
  c.token = token;
  auto r = Send(c);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : HttpReply{};
}

inline std::string ErrorCode(const HttpReply& r) {
  std::string code, message;
  wire::ParseErrorBody(r.body, &code, &message);
  return code;
}

// Polls /v1/info until `pred` holds for it (the server's own account of its
// queue); false after 30 s.
template <typename Pred>
bool WaitForInfo(const std::string& url, Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    HttpReply r = Get(url, "/v1/info");
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (!j.is_discarded() && pred(j)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace kforge::remote::testing
