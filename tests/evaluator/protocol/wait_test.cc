// Waiting on a peer (protocol/wait.h): spinning where every rank's processes
// have a core, sleeping on a futex where they would not, and in both cases
// every post, answer and barrier arrival reaches the other process.
#include "protocol/wait.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "barrier_rounds.h"
#include "protocol/control_block.h"
#include "protocol/mailbox.h"

namespace kforge::eval::proto {
namespace {

using namespace std::chrono_literals;

// Sets the spin limit and sleep slice for one test and puts the old ones
// back. With a slice of seconds, a wake-up that is not delivered shows as a
// wait of seconds instead of passing unseen on the slice's timeout.
class SpinLimitScope {
 public:
  SpinLimitScope(std::chrono::nanoseconds limit, std::chrono::microseconds slice)
      : old_(SpinLimit()), old_slice_(SleepSlice()) {
    SetSpinLimit(limit);
    SetSleepSlice(slice);
  }
  ~SpinLimitScope() {
    SetSpinLimit(old_);
    SetSleepSlice(old_slice_);
  }

 private:
  std::chrono::nanoseconds old_;
  std::chrono::microseconds old_slice_;
};

constexpr auto kLongSlice = std::chrono::microseconds(3s);

// Waits (bounded) until `pred` holds.
template <class Pred>
bool Eventually(Pred pred) {
  for (auto until = std::chrono::steady_clock::now() + 10s;
       std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(100us)) {
    if (pred()) return true;
  }
  return false;
}

TEST(Wait, SpinsOnlyWhereEveryRanksProcessesHaveACore) {
  // W = 8 on 16 cores: 16 harness and candidate processes and the coordinator.
  EXPECT_LT(SpinLimitFor(8, 16), SpinLimitFor(4, 16));
  EXPECT_LE(SpinLimitFor(8, 16), 100us);
  EXPECT_GE(SpinLimitFor(4, 16), 1ms);
  EXPECT_GE(SpinLimitFor(8, 128), 1ms);
  EXPECT_LE(SpinLimitFor(1, 2), 100us);  // a two-core machine
  EXPECT_GE(UsableCpus(), 1);
}

TEST(Wait, ASleepingCandidateIsWokenByThePostAndTheHarnessByTheAnswer) {
  SpinLimitScope scope(0ns, kLongSlice);  // sleep at once, until woken
  auto made = Mailbox::Create();
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Mailbox harness = std::move(*made);
  auto attached = Mailbox::Attach(dup(harness.fd()));
  ASSERT_TRUE(attached.ok());
  Mailbox candidate = std::move(*attached);
  std::atomic<uint32_t> abort{0};
  pid_t pid = fork();
  if (pid == 0) {
    // The candidate: three calls, each answered with its set as the claim.
    uint64_t last = 0;
    for (int k = 0; k < 3; ++k) {
      auto cmd = candidate.WaitCommand(last, &abort);
      if (!cmd.ok() || cmd->stop) _exit(2);
      last = cmd->seq;
      candidate.Answer(cmd->seq, 0, 10.0 * cmd->set);
    }
    auto stop = candidate.WaitCommand(last, &abort);
    _exit(stop.ok() && stop->stop ? 0 : 3);
  }
  ASSERT_GT(pid, 0);
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    // The candidate is asleep on its futex before the post comes.
    ASSERT_TRUE(Eventually([&] { return harness.go_sleepers() == 1; })) << "call " << seq;
    const auto t0 = std::chrono::steady_clock::now();
    harness.Post(seq, static_cast<uint32_t>(seq));
    auto answer = harness.WaitAnswer(seq, std::chrono::steady_clock::now() + 10s, &abort);
    ASSERT_TRUE(answer.ok()) << answer.status().ToString();
    EXPECT_FALSE(answer->malformed);
    EXPECT_EQ(answer->seq, seq);
    EXPECT_DOUBLE_EQ(answer->claimed_us, 10.0 * seq);
    // Both sides were woken, not left to their three-second slice.
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s) << "call " << seq;
  }
  ASSERT_TRUE(Eventually([&] { return harness.go_sleepers() == 1; }));
  harness.Stop();
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(Wait, ASleepingHarnessStillMeetsItsDeadlineAndAnAbort) {
  SpinLimitScope scope(0ns, std::chrono::microseconds(1ms));
  auto box = Mailbox::Create();
  ASSERT_TRUE(box.ok());
  std::atomic<uint32_t> abort{0};
  box->Post(1, 0);
  auto t0 = std::chrono::steady_clock::now();
  auto late = box->WaitAnswer(1, t0 + 30ms, &abort);  // nobody answers
  EXPECT_EQ(late.status().kind(), ErrorKind::kDeadlock);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 30ms);
  std::thread raise([&] {
    std::this_thread::sleep_for(20ms);
    abort.store(1);
  });
  auto cancelled = box->WaitAnswer(1, std::chrono::steady_clock::now() + 10s, &abort);
  raise.join();
  EXPECT_EQ(cancelled.status().kind(), ErrorKind::kCancelled);
}

TEST(Wait, SleepingRanksPassTheBarrierTogether) {
  SpinLimitScope scope(0ns, kLongSlice);
  constexpr int kWorld = 4;
  auto block = ControlBlock::Create(kWorld);
  ASSERT_TRUE(block.ok());
  bool slept = false;
  const auto t0 = std::chrono::steady_clock::now();
  // Arrive last in the first round, once the others have gone to sleep.
  EXPECT_TRUE(BarrierRounds(*block, kWorld, 50, [&] {
    slept = Eventually([&] { return block->shared()->barrier_sleepers.load() == kWorld - 1; });
  }));
  EXPECT_TRUE(slept) << "the other ranks never slept on the barrier";
  // 100 barriers, each woken by its last arrival, not by a three-second slice.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
}

}  // namespace
}  // namespace kforge::eval::proto
