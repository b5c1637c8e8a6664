// Warm served groups: rank groups started ahead of time, per purpose and
// shape, so that an evaluation takes one whose processes are already spawned,
// sandboxed (the early layers) and CUDA-initialised, waiting for their first
// request. An evaluation serves three kinds (its candidate group, its
// reference group that times the baseline, its expert group): each is
// started ahead for its own purpose, and a group started for one purpose is
// never handed to another. Only spawn and hello move off the evaluation's
// critical path: everything the evaluation owns (attach, which maps its
// arenas and seals the process with seccomp; configure; calibration; load)
// is still done by it. A group serves one evaluation: nothing here ever
// reuses a process that has seen an evaluation.
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

// Under MPS (ranks sharing a GPU) every rank of every group on that GPU is a
// client of its daemon, which serves at most 48 (Volta and later). The worst
// case is every rank of every group on one GPU (`--gpus 0 --world 8`), and an
// evaluation at W holds at most 4W clients while it runs: its harness group,
// reference group, candidate group and expert group (the expert in fact only
// starts once the candidate is gone: 3W at once, the fourth W is margin). At
// the largest world a task runs (8) that leaves 48 - 4 * 8 = 16 ranks for the
// groups that wait: two groups at W=8, four at W=4, eight at W=2.
inline constexpr int kMpsClientsPerGpu = 48;
inline constexpr int kMaxWorld = 8;  // tasks' world_sizes go up to 8
inline constexpr int kWaitingRanks = kMpsClientsPerGpu - 4 * kMaxWorld;

// A group wanted ahead: what it will serve ("candidate", "reference",
// "expert": ServedGroup::who) and its shape.
struct WarmShape {
  std::string purpose;
  GroupOptions options;
};

// At most one waiting group per purpose and shape, and at most
// `max_waiting_ranks` ranks in all, counting the groups being started (each
// rank holds a CUDA context: see kWaitingRanks). Refill starts each group on
// a thread of its own; Acquire takes it. Not for concurrent use by several
// evaluations (one Evaluator, one evaluation at a time): the lock only guards
// the pool against its own refill threads.
class WarmGroups {
 public:
  // `enabled` false: Refill starts nothing, and Acquire always starts a group.
  explicit WarmGroups(bool enabled = true, int max_waiting_ranks = kWaitingRanks)
      : enabled_(enabled), max_waiting_ranks_(max_waiting_ranks) {}
  // Waits for refills under way, then kills every waiting group.
  ~WarmGroups();
  WarmGroups(const WarmGroups&) = delete;
  WarmGroups& operator=(const WarmGroups&) = delete;

  // A group of `shape` for `purpose`: the one waiting for both (after any
  // refill of it under way has finished), unless one of its processes has
  // exited (then it is discarded), else one started now.
  Result<SpawnedGroup> Acquire(const std::string& purpose, const GroupOptions& shape);
  // Starts a group of each of `wanted` in the background (in that order, the
  // most wanted first), except where one of its purpose and shape waits or
  // is being started. Where the ranks waiting or being started leave no room
  // for one, the groups that have waited longest make way, oldest first,
  // except those `wanted` names and those still being started; where that
  // is not enough (or the group alone is larger than the cap), that one is
  // not started. A refill that fails leaves nothing (and says why in the
  // log): the next Acquire starts its own and reports the failure.
  void Refill(const std::vector<WarmShape>& wanted);
  void Refill(const std::string& purpose, const GroupOptions& shape) {
    Refill({WarmShape{purpose, shape}});
  }
  // Waits until no refill is under way (so that no process starts during
  // what follows, e.g. timed calls).
  void Settle();
  // Kills every waiting group (e.g. when the GPU they wait on may have
  // lost its contexts).
  void Clear();
  // Groups waiting now, and their ranks.
  size_t size() const;
  int waiting_ranks() const;
  bool enabled() const { return enabled_; }

 private:
  struct Entry {
    std::string key;  // purpose and shape
    int ranks = 0;
    std::unique_ptr<SpawnedGroup> group;  // null while being started
  };
  // Starts one group of `wanted`, making room first (Refill); `keep`: the
  // keys of the call's groups, which never make way.
  void RefillOne(const WarmShape& wanted, const std::vector<std::string>& keep);
  // Set at construction, never changed.
  const bool enabled_;
  const int max_waiting_ranks_;
  mutable Mutex mu_;
  CondVar changed_;
  // Refills under way: the entries whose group is still null.
  bool Starting() const REQUIRES(mu_);
  std::vector<Entry> entries_ GUARDED_BY(mu_);        // in the order their refills began
  std::vector<std::thread> threads_ GUARDED_BY(mu_);  // joined by Settle
};

}  // namespace kforge::eval
