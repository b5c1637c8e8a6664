#include "protocol/control_block.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "protocol/wait.h"

namespace kforge::eval {

Result<ControlBlock> ControlBlock::Create(int world) {
  if (world < 1 || world > kMaxWorldSize) {
    return Error(ErrorKind::kInvalidInput,
                 "world size must be in 1.." + std::to_string(kMaxWorldSize));
  }
  int fd = memfd_create("kforge-control", MFD_CLOEXEC);
  if (fd < 0) return Error(ErrorKind::kIo, std::string("memfd_create: ") + std::strerror(errno));
  if (ftruncate(fd, sizeof(ControlShared)) != 0) {
    close(fd);
    return Error(ErrorKind::kIo, std::string("ftruncate: ") + std::strerror(errno));
  }
  auto block = Attach(fd);
  if (!block.ok()) return block.status();
  new (block->shared_) ControlShared{};
  block->shared_->world = static_cast<uint32_t>(world);
  return block;
}

Result<ControlBlock> ControlBlock::Attach(int fd) {
  void* p = mmap(nullptr, sizeof(ControlShared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return Error(ErrorKind::kIo, std::string("mmap control block: ") + std::strerror(errno));
  }
  ControlBlock b;
  b.fd_ = fd;
  b.shared_ = static_cast<ControlShared*>(p);
  return b;
}

ControlBlock::~ControlBlock() {
  if (shared_) munmap(shared_, sizeof(ControlShared));
  if (fd_ >= 0) close(fd_);
}

ControlBlock::ControlBlock(ControlBlock&& other) noexcept : fd_(other.fd_), shared_(other.shared_) {
  other.fd_ = -1;
  other.shared_ = nullptr;
}

ControlBlock& ControlBlock::operator=(ControlBlock&& other) noexcept {
  if (this != &other) {
    this->~ControlBlock();
    fd_ = other.fd_;
    shared_ = other.shared_;
    other.fd_ = -1;
    other.shared_ = nullptr;
  }
  return *this;
}

namespace {

// A sense-reversing barrier over `size` arrivals on (count, generation).
// Spins while that is cheap (ranks usually arrive within microseconds), then
// sleeps on the generation word (protocol/wait.h) until the last arrival
// wakes everyone, re-checking the abort flag every sleep slice.
// `sleepers` counts the waiters asleep, so that the last arrival makes the
// wake-up call only when there is someone to wake.
Status Arrive(std::atomic<uint32_t>& count, std::atomic<uint32_t>& generation,
              std::atomic<uint32_t>& sleepers, uint32_t size, const std::atomic<uint32_t>& abort) {
  uint32_t gen = generation.load(std::memory_order_acquire);
  if (count.fetch_add(1, std::memory_order_acq_rel) + 1 == size) {
    count.store(0, std::memory_order_relaxed);
    proto::Bump(generation, sleepers);
    return Status::Ok();
  }
  proto::Waiter waiter;
  while (generation.load(std::memory_order_acquire) == gen) {
    if (abort.load(std::memory_order_relaxed)) {
      return Error(ErrorKind::kCancelled, "rank group aborted");
    }
    if (!waiter.Spin()) proto::SleepOn(generation, sleepers, gen);
  }
  return Status::Ok();
}

}  // namespace

Status ControlBlock::Barrier() {
  ControlShared& s = *shared_;
  return Arrive(s.barrier_count, s.barrier_generation, s.barrier_sleepers, s.world, s.abort);
}

Status ControlBlock::GroupBarrier(int kind, int index, int size) {
  if (kind < 0 || kind >= kMaxGroupKinds || index < 0 || index >= kMaxWorldSize || size < 1) {
    return Error(ErrorKind::kInvalidInput, "no such group barrier");
  }
  ControlShared& s = *shared_;
  return Arrive(s.group_count[kind][index], s.group_generation[kind][index],
                s.group_sleepers[kind][index], static_cast<uint32_t>(size), s.abort);
}

void ControlBlock::RaiseAbort() { shared_->abort.store(1); }
bool ControlBlock::aborted() const { return shared_->abort.load() != 0; }

}  // namespace kforge::eval
