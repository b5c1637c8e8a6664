// The two executors: real threads, and a discrete-event simulation for tests
// and benchmarks on fake time.
#include <chrono>
#include <map>
#include <queue>
#include <thread>

#include "kforge/agent/scheduler.h"
#include "kforge/core/mutex.h"
#include "kforge/evaluator/slots.h"

namespace kforge::agent {
namespace {

class ThreadExecutor final : public Executor {
 public:
  explicit ThreadExecutor(std::vector<std::vector<int>> cpus) : cpus_(std::move(cpus)) {}
  ~ThreadExecutor() override {
    for (auto& [id, t] : threads_) t.join();
  }

  void Start(uint64_t id, Pool pool, std::function<double()> work) override {
    MutexLock lock(&mu_);
    const size_t p = static_cast<size_t>(pool);
    std::vector<int> cpus = p < cpus_.size() ? cpus_[p] : std::vector<int>{};
    threads_.emplace(id, std::thread([this, id, cpus = std::move(cpus), work = std::move(work)] {
                       eval::PinThisThread(cpus);
                       work();
                       MutexLock l(&mu_);
                       done_.push_back(id);
                       cv_.NotifyAll();
                     }));
  }

  std::vector<uint64_t> Wait(std::optional<Clock::TimePoint> until) override {
    MutexLock lock(&mu_);
    if (until) {
      // Sleep until the time point (a retry's backoff) or a job's end. With
      // nothing in flight only the clock can wake us: returning at once
      // would make the runner's loop spin a core for the whole wait.
      auto left = *until - RealClock().Now();
      cv_.WaitFor(lock, std::max(left, Clock::Duration::zero()),
                  [this]() REQUIRES(mu_) { return !done_.empty(); });
    } else {
      cv_.Wait(lock, [this]() REQUIRES(mu_) { return !done_.empty() || threads_.empty(); });
    }
    std::vector<uint64_t> out(done_.begin(), done_.end());
    done_.clear();
    for (uint64_t id : out) {
      auto it = threads_.find(id);
      std::thread t = std::move(it->second);
      threads_.erase(it);
      lock.Unlock();
      t.join();
      lock.Lock();
    }
    return out;
  }

  // Started and not yet handed back by Wait(): a job that finished but was not
  // collected still counts, or the runner would see an idle executor with
  // queued work and give up.
  size_t in_flight() const override {
    MutexLock lock(&mu_);
    return threads_.size();
  }

 private:
  std::vector<std::vector<int>> cpus_;  // [pool]
  mutable Mutex mu_;
  CondVar cv_;
  std::map<uint64_t, std::thread> threads_ GUARDED_BY(mu_);
  std::vector<uint64_t> done_ GUARDED_BY(mu_);
};

class SimExecutor final : public Executor {
 public:
  SimExecutor(FakeClock& clock, std::function<double(Pool)> extra)
      : clock_(clock), extra_(std::move(extra)) {}

  void Start(uint64_t id, Pool pool, std::function<double()> work) override {
    double seconds = work() + (extra_ ? extra_(pool) : 0.0);
    auto end = clock_.Now() +
               std::chrono::duration_cast<Clock::Duration>(std::chrono::duration<double>(seconds));
    events_.push({end, seq_++, id});
  }

  std::vector<uint64_t> Wait(std::optional<Clock::TimePoint> until) override {
    std::vector<uint64_t> out;
    if (events_.empty() || (until && *until < events_.top().end)) {
      if (until && *until > clock_.Now()) clock_.Advance(*until - clock_.Now());
      return out;
    }
    Clock::TimePoint t = events_.top().end;
    if (t > clock_.Now()) clock_.Advance(t - clock_.Now());
    while (!events_.empty() && events_.top().end <= t) {
      out.push_back(events_.top().id);
      events_.pop();
    }
    return out;
  }

  size_t in_flight() const override { return events_.size(); }

 private:
  struct Event {
    Clock::TimePoint end;
    uint64_t seq;
    uint64_t id;
    bool operator>(const Event& o) const { return end != o.end ? end > o.end : seq > o.seq; }
  };
  FakeClock& clock_;
  std::function<double(Pool)> extra_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
};

}  // namespace

std::unique_ptr<Executor> MakeThreadExecutor(std::vector<std::vector<int>> cpus_by_pool) {
  return std::make_unique<ThreadExecutor>(std::move(cpus_by_pool));
}

std::unique_ptr<Executor> MakeSimExecutor(FakeClock& clock,
                                          std::function<double(Pool)> extra_seconds) {
  return std::make_unique<SimExecutor>(clock, std::move(extra_seconds));
}

}  // namespace kforge::agent
