// ControlBlock: a small shared-memory region (memfd) mapped by the coordinator
// and every worker of a rank group: a host barrier across rank processes, an
// abort flag the coordinator raises to release everyone, and a mailbox used by
// the emulated collectives to describe point-to-point sends.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "kforge/core/status.h"

namespace kforge::eval {

constexpr int kMaxWorldSize = 16;
constexpr int kMaxP2pOps = 64;
constexpr int kMaxGroupKinds = 4;  // KF_MAX_GROUPS

struct P2pSendRecord {
  int32_t peer;  // destination rank
  uint32_t pad;
  uint64_t offset;  // byte offset in the sender's staging buffer
  uint64_t bytes;
};

struct ControlShared {
  std::atomic<uint32_t> barrier_count;
  std::atomic<uint32_t> barrier_generation;
  std::atomic<uint32_t> abort;
  uint32_t world;
  // Per rank: the sends it staged in the current emulated group.
  uint32_t p2p_count[kMaxWorldSize];
  P2pSendRecord p2p[kMaxWorldSize][kMaxP2pOps];
  // Barriers of sub-communicators: [group kind][group index].
  std::atomic<uint32_t> group_count[kMaxGroupKinds][kMaxWorldSize];
  std::atomic<uint32_t> group_generation[kMaxGroupKinds][kMaxWorldSize];
  // Waiters asleep on each barrier's generation word (protocol/wait.h).
  std::atomic<uint32_t> barrier_sleepers;
  std::atomic<uint32_t> group_sleepers[kMaxGroupKinds][kMaxWorldSize];
};

class ControlBlock {
 public:
  // Creates a fresh block for `world` ranks (coordinator side).
  static Result<ControlBlock> Create(int world);
  // Maps a block received as a file descriptor (worker side). Takes the fd.
  static Result<ControlBlock> Attach(int fd);

  ControlBlock() = default;
  ~ControlBlock();
  ControlBlock(ControlBlock&& other) noexcept;
  ControlBlock& operator=(ControlBlock&& other) noexcept;

  int fd() const { return fd_; }
  ControlShared* shared() const { return shared_; }

  // Blocks until all `world` ranks arrive, or the abort flag is raised
  // (kCancelled). Sense-reversing: reusable back to back.
  Status Barrier();
  // The same for the `size` ranks of group `index` of sub-communicator `kind`.
  Status GroupBarrier(int kind, int index, int size);
  void RaiseAbort();
  bool aborted() const;

 private:
  int fd_ = -1;
  ControlShared* shared_ = nullptr;
};

}  // namespace kforge::eval
