// Internal: whether an eval-server still answers while one of its jobs is in
// flight. A job may run for minutes with nothing on the wire, and a server
// that is stopped, wedged or cut off (a SIGSTOP, a partition, a node that
// lost power) leaves the job's connection open: TCP keepalive notices only
// the last, and only after minutes. The watch asks the server's
// /v1/healthz (no token, answered by a thread no job holds) over its own
// connections, and the job is abandoned when no answer came for a window.
#pragma once

#include <chrono>
#include <string>
#include <thread>

#include "kforge/core/mutex.h"

namespace kforge::remote {

class LivenessWatch {
 public:
  // Starts watching `base_url` (http://host:port); `window_s` > 0.
  LivenessWatch(std::string base_url, double window_s);
  ~LivenessWatch();
  LivenessWatch(const LivenessWatch&) = delete;
  LivenessWatch& operator=(const LivenessWatch&) = delete;

  // False once the server has not answered a health check for the window.
  bool alive() const;
  double window_s() const { return window_s_; }

 private:
  void Loop();

  const std::string url_;
  const double window_s_;
  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point last_answer_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace kforge::remote
