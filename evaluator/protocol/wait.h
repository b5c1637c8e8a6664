// How a process of a rank group waits for another on shared memory (the
// mailbox, the host barriers): it spins while the wait is likely short and
// there is a core to spin on, then sleeps on a futex until the other side
// wakes it. Spinning keeps a small call's wall time exact; sleeping keeps a
// group larger than the machine's cores from taking each other's CPUs (at
// W = 8 on 16 cores, 16 spinning harness and candidate processes left some
// rank descheduled for a time slice, which the harness's clock then charged
// to the kernel: docs/methodology.md, "Waiting").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace kforge::eval::proto {

// How long a waiter spins before it sleeps (process-wide; the default spins
// for long, as on a machine with a core for every spinning process).
std::chrono::nanoseconds SpinLimit();
void SetSpinLimit(std::chrono::nanoseconds limit);
// How long a sleeper sleeps before it looks at its deadline and the abort
// flag again if nobody wakes it (1 ms; tests lengthen it to show that every
// wake-up is delivered).
std::chrono::microseconds SleepSlice();
void SetSleepSlice(std::chrono::microseconds slice);

// The spin limit for a process of a rank group of `world` ranks: long while
// the harness and candidate processes of every rank (2 * world, plus the
// coordinator) each have a core, short (tens of microseconds) where they
// would not. `cpus` is the number of cores this process may run on.
std::chrono::nanoseconds SpinLimitFor(int world, int cpus);
// The cores this process may run on (its affinity mask), at least 1.
int UsableCpus();

// Sleeps while *word == expected, at most `timeout` (spurious returns are
// fine: callers re-check). The word lives in memory shared across processes.
void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected,
               std::chrono::microseconds timeout);
// Wakes every process sleeping on `word`.
void FutexWakeAll(const std::atomic<uint32_t>* word);

// The two sides of a wait on a shared word, with a count of its sleepers so
// that the waking side makes the system call only when someone sleeps:
// SleepOn sleeps (at most a sleep slice) unless `word` moved on from `seen`;
// Bump moves `word` on and wakes its sleepers.
void SleepOn(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleepers, uint32_t seen);
void Bump(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleepers);

// One wait: spins until the spin limit has passed since it was made, then
// says it is time to sleep.
class Waiter {
 public:
  Waiter();
  // True while the waiter should keep spinning (it pauses the CPU briefly).
  bool Spin();
  // Every 1024th call is true: time to look at a deadline.
  bool CheckClock() { return (++checks_ & 1023) == 0; }

 private:
  std::chrono::steady_clock::time_point until_;
  uint32_t spins_ = 0;
  uint32_t checks_ = 0;
  bool sleeping_ = false;
};

}  // namespace kforge::eval::proto
