#include "kforge/agent/scheduler.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "kforge/evaluator/slots.h"

namespace kforge::agent {
namespace {

TEST(Scheduler, ModelCallsAreRoundRobinAcrossModels) {
  FakeClock clock;
  PoolLimits limits;
  limits.llm_total = 3;
  limits.llm_per_model = 10;
  Scheduler s(limits, clock);
  uint64_t id = 1;
  for (int i = 0; i < 5; ++i) s.Enqueue({id++, Pool::kLlm, "a"});  // a floods the queue first
  for (int i = 0; i < 5; ++i) s.Enqueue({id++, Pool::kLlm, "b"});
  s.Enqueue({id++, Pool::kLlm, "c"});
  auto first = s.DispatchReady();
  ASSERT_EQ(first.size(), 3u);
  // One of each model, not three of the one that queued first.
  EXPECT_EQ(first[0].id, 1u);
  EXPECT_EQ(first[1].id, 6u);
  EXPECT_EQ(first[2].id, 11u);
  s.Release(1);
  s.Release(6);
  auto next = s.DispatchReady();
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0].id, 2u);  // after c, back to a, then b
  EXPECT_EQ(next[1].id, 7u);
}

TEST(Scheduler, PerModelCapHoldsEvenWithFreeGlobalSlots) {
  FakeClock clock;
  PoolLimits limits;
  limits.llm_total = 10;
  limits.llm_per_model = 2;
  limits.llm_model_override["slow"] = 1;
  Scheduler s(limits, clock);
  for (uint64_t i = 1; i <= 4; ++i) s.Enqueue({i, Pool::kLlm, "fast"});
  for (uint64_t i = 5; i <= 8; ++i) s.Enqueue({i, Pool::kLlm, "slow"});
  EXPECT_EQ(s.DispatchReady().size(), 3u);
  EXPECT_EQ(s.busy(Pool::kLlm), 3);
  EXPECT_EQ(s.queued(Pool::kLlm), 5u);
}

TEST(Scheduler, GpuSetsRunOneEvaluationEachAndNeverIdleWhileWorkWaits) {
  FakeClock clock;
  PoolLimits limits;
  limits.gpu_sets = 2;
  Scheduler s(limits, clock);
  for (uint64_t i = 1; i <= 5; ++i) s.Enqueue({i, Pool::kGpu, ""});
  auto d = s.DispatchReady();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].slot, 0);
  EXPECT_EQ(d[1].slot, 1);
  EXPECT_FALSE(s.GpuIdleWhileReady());
  clock.Advance(std::chrono::seconds(10));
  s.Release(d[1].id);
  EXPECT_TRUE(s.GpuIdleWhileReady());  // until the next dispatch
  auto d2 = s.DispatchReady();
  ASSERT_EQ(d2.size(), 1u);
  EXPECT_EQ(d2[0].slot, 1);
  EXPECT_EQ(d2[0].id, 3u);  // first come, first served
  EXPECT_FALSE(s.GpuIdleWhileReady());
  clock.Advance(std::chrono::seconds(5));
  auto busy = s.GpuBusySeconds();
  EXPECT_DOUBLE_EQ(busy[0], 15);
  EXPECT_DOUBLE_EQ(busy[1], 15);
}

TEST(Scheduler, CompileSlotsBoundConcurrentCompiles) {
  FakeClock clock;
  PoolLimits limits;
  limits.compile_slots = 2;
  Scheduler s(limits, clock);
  for (uint64_t i = 1; i <= 3; ++i) s.Enqueue({i, Pool::kCompile, ""});
  EXPECT_EQ(s.DispatchReady().size(), 2u);
  EXPECT_TRUE(s.DispatchReady().empty());
  s.Release(2);
  auto d = s.DispatchReady();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].id, 3u);
  EXPECT_EQ(d[0].slot, 1);
}

TEST(Scheduler, SuspendedSlotsTakeNoWorkUntilTheyResume) {
  FakeClock clock;
  PoolLimits limits;
  limits.gpu_sets = 2;
  limits.compile_slots = 1;
  Scheduler s(limits, clock);
  s.Suspend(Pool::kGpu, 0, clock.Now() + std::chrono::seconds(30));
  EXPECT_FALSE(s.NextResume());  // nothing waits for it
  s.Enqueue({1, Pool::kGpu, ""});
  s.Enqueue({2, Pool::kGpu, ""});
  auto d = s.DispatchReady();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].slot, 1);  // not the suspended set
  EXPECT_FALSE(s.GpuIdleWhileReady());
  ASSERT_TRUE(s.NextResume());
  EXPECT_EQ(*s.NextResume(), clock.Now() + std::chrono::seconds(30));
  clock.Advance(std::chrono::seconds(29));
  EXPECT_TRUE(s.DispatchReady().empty());
  clock.Advance(std::chrono::seconds(1));
  auto later = s.DispatchReady();
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].id, 2u);
  EXPECT_EQ(later[0].slot, 0);
  EXPECT_FALSE(s.NextResume());

  s.Suspend(Pool::kCompile, 0, clock.Now() + std::chrono::seconds(5));
  s.Enqueue({3, Pool::kCompile, ""});
  EXPECT_TRUE(s.DispatchReady().empty());
  clock.Advance(std::chrono::seconds(5));
  ASSERT_EQ(s.DispatchReady().size(), 1u);
}

TEST(SimExecutor, CompletesInOrderOfSimulatedTime) {
  FakeClock clock;
  auto ex = MakeSimExecutor(clock);
  ex->Start(1, Pool::kLlm, [] { return 30.0; });
  ex->Start(2, Pool::kGpu, [] { return 10.0; });
  EXPECT_EQ(ex->in_flight(), 2u);
  EXPECT_EQ(ex->Wait(std::nullopt), std::vector<uint64_t>{2});
  EXPECT_EQ(clock.Elapsed(), std::chrono::seconds(10));
  // A timer before the next completion advances only to the timer.
  EXPECT_TRUE(ex->Wait(clock.Now() + std::chrono::seconds(5)).empty());
  EXPECT_EQ(clock.Elapsed(), std::chrono::seconds(15));
  EXPECT_EQ(ex->Wait(std::nullopt), std::vector<uint64_t>{1});
  EXPECT_EQ(clock.Elapsed(), std::chrono::seconds(30));
}

TEST(ThreadExecutor, RunsWorkOnThreadsAndReportsCompletion) {
  auto ex = MakeThreadExecutor();
  std::atomic<int> ran{0};
  for (uint64_t i = 1; i <= 3; ++i)
    ex->Start(i, Pool::kCompile, [&ran] {
      ++ran;
      return 0.0;
    });
  std::vector<uint64_t> done;
  while (done.size() < 3) {
    for (uint64_t id : ex->Wait(std::nullopt)) done.push_back(id);
  }
  std::sort(done.begin(), done.end());
  EXPECT_EQ(done, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(ran.load(), 3);
  EXPECT_EQ(ex->in_flight(), 0u);
}

// A pool's jobs run pinned to its CPUs, and so do the processes they start
// (a child inherits its thread's mask): a GPU evaluation's ranks keep cores no
// compile can take. Another pool's jobs are not pinned.
TEST(ThreadExecutor, PinsEachPoolsJobsToItsCpus) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  int last = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) last = c;
  }
  ASSERT_GE(last, 0);
  std::vector<std::vector<int>> cpus(3);
  cpus[static_cast<size_t>(Pool::kGpu)] = {last};
  auto ex = MakeThreadExecutor(cpus);
  auto mask_in = [&](Pool pool, bool in_child) {
    std::atomic<int> count{-1};
    std::atomic<bool> only_last{false};
    ex->Start(1, pool, [&] {
      cpu_set_t set;
      if (in_child) {
        int fds[2];
        if (pipe(fds) != 0) return 0.0;
        pid_t pid = fork();
        if (pid == 0) {
          sched_getaffinity(0, sizeof(set), &set);
          const int n = CPU_COUNT(&set);
          const char b = static_cast<char>(n == 1 && CPU_ISSET(last, &set) ? 1 : n > 1 ? 2 : 0);
          (void)!write(fds[1], &b, 1);
          _exit(0);
        }
        char b = 0;
        (void)!read(fds[0], &b, 1);
        waitpid(pid, nullptr, 0);
        close(fds[0]);
        close(fds[1]);
        count = b == 2 ? 2 : 1;
        only_last = b == 1;
        return 0.0;
      }
      sched_getaffinity(0, sizeof(set), &set);
      count = CPU_COUNT(&set);
      only_last = CPU_ISSET(last, &set);
      return 0.0;
    });
    while (ex->Wait(std::nullopt).empty()) {
    }
    return std::pair<int, bool>(count.load(), only_last.load());
  };
  auto [n_gpu, last_gpu] = mask_in(Pool::kGpu, false);
  EXPECT_EQ(n_gpu, 1);
  EXPECT_TRUE(last_gpu);
  auto [n_child, last_child] = mask_in(Pool::kGpu, true);
  EXPECT_EQ(n_child, 1);
  EXPECT_TRUE(last_child);
  auto [n_compile, unused] = mask_in(Pool::kCompile, false);
  (void)unused;
  EXPECT_EQ(n_compile, CPU_COUNT(&allowed));
}

// Regression: a job that has finished but not yet been collected by Wait() is
// still in flight; otherwise the runner sees an idle executor while work is
// queued and stops the run ("no pool can run them").
TEST(ThreadExecutor, FinishedButUncollectedJobsStayInFlight) {
  auto ex = MakeThreadExecutor();
  std::atomic<bool> ran{false};
  ex->Start(7, Pool::kCompile, [&] {
    ran = true;
    return 0.0;
  });
  while (!ran) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the thread has returned by now
  EXPECT_EQ(ex->in_flight(), 1u);
  auto done = ex->Wait(std::nullopt);
  ASSERT_EQ(done, std::vector<uint64_t>{7});
  EXPECT_EQ(ex->in_flight(), 0u);
}

// Regression: with nothing in flight, waiting for a retry's time point
// returned at once, so the run loop spun a core through every backoff (2 min
// of CPU in a 3 min run). It must sleep until the time point.
TEST(ThreadExecutor, WaitWithNothingInFlightSleepsUntilTheTimePoint) {
  auto ex = MakeThreadExecutor();
  const auto until = RealClock().Now() + std::chrono::milliseconds(50);
  EXPECT_TRUE(ex->Wait(until).empty());
  EXPECT_GE(RealClock().Now(), until);
}

}  // namespace
}  // namespace kforge::agent
