// The coordinator's end of the seccomp user notifications: one listener per
// candidate process. A denied call blocks its thread until we answer; we
// record it, answer EPERM and tell the evaluation (which kills the group).
// KFORGE_SANDBOX_LEARN=1 answers "continue" instead and only records: the
// mode that measures what CUDA needs (docs/integrity.md).
#pragma once

#include <atomic>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kforge/core/mutex.h"
#include "sandbox/sandbox.h"

namespace kforge::sandbox {

class Supervisor {
 public:
  Supervisor();
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Takes ownership of `listener_fd`, the seccomp listener of `rank`'s process.
  void Watch(int rank, int pid, int listener_fd);
  // Called (on the supervisor's thread) after the first violation.
  void OnViolation(std::function<void()> fn);

  std::vector<Violation> Violations() const;
  bool learning() const { return learn_; }

 private:
  void Loop();
  struct Watched {
    int rank, pid, fd;
  };
  bool learn_ = false;
  mutable Mutex mu_;
  std::vector<Watched> watched_ GUARDED_BY(mu_);
  std::vector<Violation> violations_ GUARDED_BY(mu_);
  std::function<void()> on_violation_ GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kforge::sandbox
