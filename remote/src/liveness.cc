#include "liveness.h"

#include <algorithm>

#include "http.h"

namespace kforge::remote {

using Clock = std::chrono::steady_clock;

LivenessWatch::LivenessWatch(std::string base_url, double window_s)
    : url_(std::move(base_url) + "/v1/healthz"),
      window_s_(window_s),
      last_answer_(Clock::now()),
      thread_([this] { Loop(); }) {}

LivenessWatch::~LivenessWatch() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  thread_.join();
}

bool LivenessWatch::alive() const {
  MutexLock lock(&mu_);
  return Clock::now() - last_answer_ <= std::chrono::duration<double>(window_s_);
}

void LivenessWatch::Loop() {
  // Four checks a window (at most one every 10 s), each given a quarter of
  // it: one slow answer does not lose the server, a window of silence does.
  const double period_s = std::min(window_s_ / 4, 10.0);
  HttpCall call;
  call.url = url_;
  call.connect_timeout_s = period_s;
  call.total_timeout_s = period_s;
  call.max_response_bytes = 4096;
  call.keep_going = [this] {
    MutexLock lock(&mu_);
    return !stop_;
  };
  MutexLock lock(&mu_);
  while (!stop_) {
    lock.Unlock();
    // Any HTTP answer is a live server (a draining one answers 503 and still
    // finishes the job it holds).
    const Result<HttpReply> r = Send(call);
    lock.Lock();
    if (r.ok() && r->status > 0) last_answer_ = Clock::now();
    cv_.WaitFor(lock, std::chrono::duration<double>(period_s),
                [this]() REQUIRES(mu_) { return stop_; });
  }
}

}  // namespace kforge::remote
