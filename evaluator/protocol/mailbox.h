// The timing mailbox: a small shared page between harness rank r (trusted) and
// candidate rank r (untrusted), one per rank pair. The harness posts "run call
// `seq` on set `set`", the candidate runs it and posts "done `seq`" with its
// own (unbelieved) event time; the harness keeps the time between the two on
// its own clock. The candidate can write anything into its page at any time,
// so the harness side reads it as outside input: only the exact sequence
// number it posted counts as an answer, and a claim is a bounded double.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "kforge/core/status.h"

namespace kforge::eval::proto {

struct MailboxShared {
  std::atomic<uint64_t> go_seq;      // harness: the call to run (0: none yet)
  std::atomic<uint32_t> go_set;      // harness: its input/output set
  std::atomic<uint32_t> stop;        // harness: leave the serve loop
  std::atomic<uint64_t> done_seq;    // candidate: the last call it finished
  std::atomic<int32_t> status;       // candidate: 0, or its error for done_seq
  std::atomic<uint64_t> claim_bits;  // candidate: its event time (us) as double bits
  // Futex words (protocol/wait.h): bumped with every post or stop, and with
  // every answer; a side about to sleep on one counts itself in its sleepers
  // so that the other side makes the wake-up call only when someone sleeps.
  std::atomic<uint32_t> go_word;
  std::atomic<uint32_t> go_sleepers;
  std::atomic<uint32_t> done_word;
  std::atomic<uint32_t> done_sleepers;
};

class Mailbox {
 public:
  static Result<Mailbox> Create();        // coordinator: a fresh memfd
  static Result<Mailbox> Attach(int fd);  // a worker: takes the fd
  Mailbox() = default;
  ~Mailbox();
  Mailbox(Mailbox&& other) noexcept;
  Mailbox& operator=(Mailbox&& other) noexcept;

  int fd() const { return fd_; }
  bool valid() const { return shared_ != nullptr; }
  // How many waiters for a post are asleep (protocol/wait.h); for tests.
  uint32_t go_sleepers() const { return shared_->go_sleepers.load(); }

  // ---- harness side ----
  void Post(uint64_t seq, uint32_t set);
  void Stop();
  struct CallAnswer {
    uint64_t seq = 0;
    int32_t status = 0;
    double claimed_us = 0;   // finite and >= 0, else the answer is malformed
    bool malformed = false;  // a sequence number that was never posted, or a bad claim
  };
  // Waits until the candidate answers `seq` (or anything else: malformed).
  // kDeadlock past the deadline; kCancelled when *abort becomes non-zero.
  Result<CallAnswer> WaitAnswer(uint64_t seq, std::chrono::steady_clock::time_point deadline,
                                const std::atomic<uint32_t>* abort) const;

  // ---- candidate side ----
  struct Command {
    bool stop = false;
    uint64_t seq = 0;
    uint32_t set = 0;
  };
  // Waits for a go newer than `last_seq`, or stop. kCancelled on *abort.
  Result<Command> WaitCommand(uint64_t last_seq, const std::atomic<uint32_t>* abort) const;
  void Answer(uint64_t seq, int32_t status, double event_us);

 private:
  int fd_ = -1;
  MailboxShared* shared_ = nullptr;
};

}  // namespace kforge::eval::proto
