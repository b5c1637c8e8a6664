#include "protocol/wait.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace kforge::eval::proto {
namespace {

using std::chrono::nanoseconds;

// Long enough that a spinning waiter never sleeps inside a timed call of any
// realistic length while cores are free (as before futexes were used).
constexpr nanoseconds kLongSpin = std::chrono::milliseconds(20);
// Short enough that a sleeping rank frees its core within a small call, long
// enough that back-to-back handshakes (a barrier, a quick answer) never sleep.
constexpr nanoseconds kShortSpin = std::chrono::microseconds(30);

std::atomic<int64_t> g_spin_ns{kLongSpin.count()};
std::atomic<int64_t> g_slice_us{1000};

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

nanoseconds SpinLimit() { return nanoseconds(g_spin_ns.load(std::memory_order_relaxed)); }

void SetSpinLimit(nanoseconds limit) {
  g_spin_ns.store(limit.count() < 0 ? 0 : limit.count(), std::memory_order_relaxed);
}

std::chrono::microseconds SleepSlice() {
  return std::chrono::microseconds(g_slice_us.load(std::memory_order_relaxed));
}

void SetSleepSlice(std::chrono::microseconds slice) {
  g_slice_us.store(slice.count() < 1 ? 1 : slice.count(), std::memory_order_relaxed);
}

nanoseconds SpinLimitFor(int world, int cpus) {
  return 2 * world + 1 <= cpus ? kLongSpin : kShortSpin;
}

int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<int>(n) : 1;
  }
  const int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected,
               std::chrono::microseconds timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  timespec ts{static_cast<time_t>(timeout.count() / 1000000),
              static_cast<long>(timeout.count() % 1000000) * 1000};
  // Not FUTEX_PRIVATE: the word is in a mapping shared with other processes.
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr,
          0);
}

void FutexWakeAll(const std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
          0);
}

void SleepOn(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleepers, uint32_t seen) {
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (word.load(std::memory_order_seq_cst) == seen) FutexWait(&word, seen, SleepSlice());
  sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

void Bump(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleepers) {
  word.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&word);
}

Waiter::Waiter() : until_(std::chrono::steady_clock::now() + SpinLimit()) {}

bool Waiter::Spin() {
  if (sleeping_) return false;
  CpuRelax();
  if ((++spins_ & 63) == 0 && std::chrono::steady_clock::now() >= until_) sleeping_ = true;
  return !sleeping_;
}

}  // namespace kforge::eval::proto
