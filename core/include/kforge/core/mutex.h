// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with
// the capability annotations clang's -Wthread-safety needs (libstdc++'s own
// types carry none), as LevelDB's port::Mutex does. Use them for every lock
// in kforge, and mark what each lock guards:
//
//   mutable Mutex mu_;
//   CondVar cv_;
//   std::vector<Job> done_ GUARDED_BY(mu_);
//
//   MutexLock lock(&mu_);
//   cv_.Wait(lock, [this]() REQUIRES(mu_) { return !done_.empty(); });
//
// A predicate runs with the lock held, so it says REQUIRES(mu_) for the
// analysis to check its body. Behaviour is exactly std::mutex's and
// std::condition_variable's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "kforge/core/thread_annotations.h"

namespace kforge {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // For code the analysis cannot follow (a lock taken by a caller it cannot
  // see); nothing is checked at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction. Unlock() and Lock() let the
// scope give the lock up for a while (to join a thread, to sleep).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : lock_(mu->mu_) {}
  ~MutexLock() RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

// A std::condition_variable waited on through a MutexLock.
class CondVar {
 public:
  void Wait(MutexLock& lock) { cv_.wait(lock.lock_); }
  template <typename Predicate>
  void Wait(MutexLock& lock, Predicate done) {
    cv_.wait(lock.lock_, std::move(done));
  }
  // Returns done()'s value at the end: false when the time ran out first.
  template <typename Rep, typename Period, typename Predicate>
  bool WaitFor(MutexLock& lock, const std::chrono::duration<Rep, Period>& timeout, Predicate done) {
    return cv_.wait_for(lock.lock_, timeout, std::move(done));
  }

  void NotifyOne() noexcept { cv_.notify_one(); }
  void NotifyAll() noexcept { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace kforge
