// Starting one worker process of a group (run/worker_group.h).
#pragma once

#include <sys/types.h>

#include "kforge/core/status.h"
#include "run/worker_group.h"

namespace kforge::eval {

// Spawns rank `rank` of a group of `o` with fds 3 (channel), 4 (control
// block) and, for a candidate, 5 (mailbox); every other descriptor is closed
// in the child. `output_fd` >= 0 becomes its stdout and stderr.
Result<pid_t> SpawnWorker(const GroupOptions& o, int rank, int channel_fd, int control_fd,
                          int mailbox_fd, int output_fd);

}  // namespace kforge::eval
