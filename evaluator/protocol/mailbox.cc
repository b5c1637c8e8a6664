#include "protocol/mailbox.h"

#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <new>

#include "protocol/wait.h"

namespace kforge::eval::proto {

Result<Mailbox> Mailbox::Create() {
  int fd = memfd_create("kforge-mailbox", MFD_CLOEXEC);
  if (fd < 0) return Error(ErrorKind::kIo, std::string("memfd_create: ") + std::strerror(errno));
  if (ftruncate(fd, sizeof(MailboxShared)) != 0) {
    close(fd);
    return Error(ErrorKind::kIo, std::string("ftruncate: ") + std::strerror(errno));
  }
  KF_ASSIGN_OR_RETURN(Mailbox m, Attach(fd));
  new (m.shared_) MailboxShared{};
  return m;
}

Result<Mailbox> Mailbox::Attach(int fd) {
  void* p = mmap(nullptr, sizeof(MailboxShared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return Error(ErrorKind::kIo, std::string("mmap mailbox: ") + std::strerror(errno));
  }
  Mailbox m;
  m.fd_ = fd;
  m.shared_ = static_cast<MailboxShared*>(p);
  return m;
}

Mailbox::~Mailbox() {
  if (shared_) munmap(shared_, sizeof(MailboxShared));
  if (fd_ >= 0) close(fd_);
}

Mailbox::Mailbox(Mailbox&& o) noexcept : fd_(o.fd_), shared_(o.shared_) {
  o.fd_ = -1;
  o.shared_ = nullptr;
}

Mailbox& Mailbox::operator=(Mailbox&& o) noexcept {
  if (this != &o) {
    this->~Mailbox();
    fd_ = o.fd_;
    shared_ = o.shared_;
    o.fd_ = -1;
    o.shared_ = nullptr;
  }
  return *this;
}

void Mailbox::Post(uint64_t seq, uint32_t set) {
  shared_->go_set.store(set, std::memory_order_relaxed);
  shared_->go_seq.store(seq, std::memory_order_release);
  Bump(shared_->go_word, shared_->go_sleepers);
}

void Mailbox::Stop() {
  shared_->stop.store(1, std::memory_order_release);
  Bump(shared_->go_word, shared_->go_sleepers);
}

Result<Mailbox::CallAnswer> Mailbox::WaitAnswer(uint64_t seq,
                                                std::chrono::steady_clock::time_point deadline,
                                                const std::atomic<uint32_t>* abort) const {
  Waiter waiter;
  while (true) {
    const uint32_t word = shared_->done_word.load(std::memory_order_acquire);
    uint64_t done = shared_->done_seq.load(std::memory_order_acquire);
    if (done != seq && done + 1 != seq) {
      CallAnswer a;
      a.seq = done;
      a.malformed = true;  // a number it was never given
      return a;
    }
    if (done == seq) {
      CallAnswer a;
      a.seq = done;
      a.status = shared_->status.load(std::memory_order_relaxed);
      a.claimed_us = std::bit_cast<double>(shared_->claim_bits.load(std::memory_order_relaxed));
      if (!std::isfinite(a.claimed_us) || a.claimed_us < 0 || a.claimed_us > 1e12) {
        a.malformed = true;
        a.claimed_us = 0;
      }
      return a;
    }
    if (abort != nullptr && abort->load(std::memory_order_relaxed) != 0) {
      return Error(ErrorKind::kCancelled, "rank group aborted");
    }
    const bool spinning = waiter.Spin();
    if ((!spinning || waiter.CheckClock()) && std::chrono::steady_clock::now() > deadline) {
      return Error(ErrorKind::kDeadlock,
                   "the candidate did not answer call " + std::to_string(seq));
    }
    if (!spinning) SleepOn(shared_->done_word, shared_->done_sleepers, word);
  }
}

Result<Mailbox::Command> Mailbox::WaitCommand(uint64_t last_seq,
                                              const std::atomic<uint32_t>* abort) const {
  Waiter waiter;
  while (true) {
    const uint32_t word = shared_->go_word.load(std::memory_order_acquire);
    if (shared_->stop.load(std::memory_order_acquire) != 0) return Command{true, 0, 0};
    uint64_t seq = shared_->go_seq.load(std::memory_order_acquire);
    if (seq > last_seq) return Command{false, seq, shared_->go_set.load(std::memory_order_relaxed)};
    if (abort != nullptr && abort->load(std::memory_order_relaxed) != 0) {
      return Error(ErrorKind::kCancelled, "rank group aborted");
    }
    if (!waiter.Spin()) SleepOn(shared_->go_word, shared_->go_sleepers, word);
  }
}

void Mailbox::Answer(uint64_t seq, int32_t status, double event_us) {
  shared_->status.store(status, std::memory_order_relaxed);
  shared_->claim_bits.store(std::bit_cast<uint64_t>(event_us), std::memory_order_relaxed);
  shared_->done_seq.store(seq, std::memory_order_release);
  Bump(shared_->done_word, shared_->done_sleepers);
}

}  // namespace kforge::eval::proto
