// Rounds of a control block's world barrier across processes, for the
// barrier tests: this process and `world - 1` forked ones each add to a
// shared counter and meet the others; after round k's barrier every process
// must see (k + 1) * world additions.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <vector>

#include "protocol/control_block.h"

namespace kforge::eval {

// True when every process saw every round complete. `before_first` runs in
// this process just before its first arrival (e.g. to wait until the others
// are asleep on the barrier).
inline bool BarrierRounds(ControlBlock& block, int world, int rounds,
                          const std::function<void()>& before_first = {}) {
  auto* counter = reinterpret_cast<std::atomic<uint32_t>*>(&block.shared()->p2p[0][0]);
  counter->store(0);
  auto round = [&](int k) {
    counter->fetch_add(1);
    if (!block.Barrier().ok()) return false;
    const bool seen = counter->load() >= static_cast<uint32_t>((k + 1) * world);
    return block.Barrier().ok() && seen;
  };
  std::vector<pid_t> kids;
  for (int r = 1; r < world; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      for (int k = 0; k < rounds; ++k) {
        if (!round(k)) _exit(3);
      }
      _exit(0);
    }
    kids.push_back(pid);
  }
  bool ok = true;
  for (int k = 0; k < rounds; ++k) {
    if (k == 0 && before_first) before_first();
    ok = round(k) && ok;
  }
  for (pid_t pid : kids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

}  // namespace kforge::eval
