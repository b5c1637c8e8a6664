// Starting one worker process of a group (run/worker_group.h).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "run/worker_group.h"

namespace kforge::eval {

// KFORGE_PIN_RANKS=1 (an experiment on the small sizes' timing spread,
// docs/methodology.md): rank r of every group (harness, candidate, reference,
// expert) runs on the r-th of `world` equal blocks of the cores this process
// may use, so that the reference's and the candidate's rank r always share
// the same cores and memory node. Otherwise, or with fewer cores than ranks,
// none: the scheduler places every process.
struct RankCpus {
  std::vector<int> cpus;  // this rank's cores
  int all = 0;            // the cores of every rank together
};
std::optional<RankCpus> PinnedCpus(int world, int rank);

// Spawns rank `rank` of a group of `o` with fds 3 (channel), 4 (control
// block) and, for a candidate, 5 (mailbox); every other descriptor is closed
// in the child. `output_fd` >= 0 becomes its stdout and stderr.
Result<pid_t> SpawnWorker(const GroupOptions& o, int rank, int channel_fd, int control_fd,
                          int mailbox_fd, int output_fd);

}  // namespace kforge::eval
