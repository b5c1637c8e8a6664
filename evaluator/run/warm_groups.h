// Warm served groups: candidate-role rank groups started ahead of time, per
// shape, so that an evaluation takes one whose processes are already spawned,
// sandboxed (the early layers) and CUDA-initialised, waiting for their first
// request. Only spawn and hello move off the evaluation's critical path:
// everything the evaluation owns (attach, which maps its arenas and seals the
// process with seccomp; configure; calibration; load) is still done by it.
// A group serves one evaluation: nothing here ever reuses a process that has
// seen an evaluation.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kforge/core/mutex.h"
#include "kforge/core/status.h"
#include "protocol/mailbox.h"
#include "run/worker_group.h"

namespace kforge::eval {

// A started candidate-role group and what was made for it at spawn: a
// mailbox per rank (rank r's is its worker's fd 5) and a fresh, empty private
// directory, the only one its sandbox lets it read a kernel from (Landlock
// grants it at spawn, so it must exist before and belong to this group alone).
struct SpawnedGroup {
  std::unique_ptr<WorkerGroup> group;
  std::vector<proto::Mailbox> mailboxes;  // [rank]
  std::filesystem::path dir;              // owner-only until a kernel is placed in it
  bool warm = false;                      // started ahead of the Acquire that returned it
  // Kills the processes and removes the directory.
  void Discard();
};

// Makes the mailboxes and the directory of `shape` (its mailbox_fds and
// candidate_dir are ignored: they are the group's own), then starts it.
Result<SpawnedGroup> SpawnGroup(GroupOptions shape);

// What is fixed at spawn, as one comparable string: every GroupOptions field
// except the per-group ones (mailboxes, directory) and the start deadline.
std::string ShapeKey(const GroupOptions& shape);

// At most one waiting group per shape, and at most `max_groups` in all (each
// holds a CUDA context per rank: under MPS, where ranks share a GPU, the
// daemon serves a bounded number of clients, 48 per GPU). Refill starts one
// on a thread of its own; Acquire takes it. Not for concurrent use by several evaluations (one
// Evaluator, one evaluation at a time): the lock only guards the pool against
// its own refill threads.
class WarmGroups {
 public:
  // `enabled` false: Refill starts nothing, and Acquire always starts a group.
  explicit WarmGroups(bool enabled = true, size_t max_groups = 2)
      : enabled_(enabled), max_groups_(max_groups) {}
  // Waits for refills under way, then kills every waiting group.
  ~WarmGroups();
  WarmGroups(const WarmGroups&) = delete;
  WarmGroups& operator=(const WarmGroups&) = delete;

  // A group of `shape`: the one waiting for it (after any refill of it under
  // way has finished), unless one of its processes has exited (then it is
  // discarded), else one started now.
  Result<SpawnedGroup> Acquire(const GroupOptions& shape);
  // Starts a group of `shape` in the background unless one waits or is
  // being started; the longest-waiting group of another shape is killed
  // first where `max_groups` already wait or are being started. A refill that fails leaves nothing
  // (and says why in the log): the next Acquire starts its own and reports the failure.
  void Refill(const GroupOptions& shape);
  // Waits until no refill is under way (so that no process starts during
  // what follows, e.g. timed calls).
  void Settle();
  // Kills every waiting group (e.g. when the GPU they wait on may have
  // lost its contexts).
  void Clear();
  // Groups waiting now.
  size_t size() const;
  bool enabled() const { return enabled_; }

 private:
  struct Entry {
    std::string key;
    std::unique_ptr<SpawnedGroup> group;  // null while being started
  };
  // Set at construction, never changed.
  const bool enabled_;
  const size_t max_groups_;
  mutable Mutex mu_;
  CondVar changed_;
  // Refills under way: the entries whose group is still null.
  bool Starting() const REQUIRES(mu_);
  std::vector<Entry> entries_ GUARDED_BY(mu_);        // in the order their refills began
  std::vector<std::thread> threads_ GUARDED_BY(mu_);  // joined by Settle
};

}  // namespace kforge::eval
