// SlurmWatch: a run's eye on its Slurm job. Slurm requeues a preempted task
// or one on a failed node by itself (--requeue); a task whose server exited
// or hit the time limit it does not, so this requeues it, a bounded number
// of times, and says so.
#include <fmt/format.h>

#include <map>
#include <thread>

#include "kforge/core/mutex.h"
#include "kforge/remote/slurm.h"

namespace kforge::remote {

namespace {

// Ended by a failure, not by a person (CANCELLED) or by finishing.
bool Requeueable(const std::string& state) {
  return state == "FAILED" || state == "NODE_FAIL" || state == "TIMEOUT" || state == "PREEMPTED" ||
         state == "BOOT_FAIL" || state == "OUT_OF_MEMORY";
}

}  // namespace

struct SlurmWatch::Impl {
  SlurmJob job;
  SlurmDeps deps;
  std::chrono::seconds period;
  int max_requeues;
  Mutex mu;
  CondVar cv;
  bool stop GUARDED_BY(mu) = false;
  // Used by the watch's thread only.
  std::map<std::string, std::string> last_state;  // task -> state
  std::map<std::string, int> requeued;
  std::thread thread;

  void Say(const std::string& line) {
    if (deps.say) deps.say(line);
  }

  void Look() {
    auto tasks = QuerySlurmJob(job, *deps.runner);
    if (!tasks.ok()) return;
    for (const SlurmTaskState& t : *tasks) {
      std::string& last = last_state[t.id];
      if (last != t.state) {
        if (!last.empty())
          Say(fmt::format("Slurm task {}: {} -> {} ({})", t.id, last, t.state, t.reason));
        last = t.state;
      }
      if (job.mode != "batch" || !Requeueable(t.state)) continue;
      int& n = requeued[t.id];
      if (n >= max_requeues) continue;
      ++n;
      ProcessOptions o;
      o.timeout = std::chrono::seconds(60);
      auto r = deps.runner->Run({"scontrol", "requeue", t.id}, o);
      const bool ok = r.ok() && r->Succeeded();
      Say(fmt::format("Slurm task {} ended ({}); {} ({} of {}){}", t.id, t.state,
                      ok ? "requeued it" : "could not requeue it", n, max_requeues,
                      ok || !r.ok() ? "" : ": " + r->err));
    }
  }

  void Loop() {
    MutexLock lock(&mu);
    while (!stop) {
      lock.Unlock();
      Look();
      lock.Lock();
      cv.WaitFor(lock, period, [this]() REQUIRES(mu) { return stop; });
    }
  }
};

SlurmWatch::SlurmWatch(SlurmJob job, SlurmDeps deps, std::chrono::seconds period, int max_requeues)
    : impl_(std::make_unique<Impl>()) {
  impl_->job = std::move(job);
  impl_->deps = std::move(deps);
  impl_->period = period;
  impl_->max_requeues = max_requeues;
  Impl* self = impl_.get();
  impl_->thread = std::thread([self] { self->Loop(); });
}

SlurmWatch::~SlurmWatch() {
  {
    MutexLock lock(&impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.NotifyAll();
  impl_->thread.join();
}

}  // namespace kforge::remote
