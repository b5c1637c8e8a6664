// How the coordinator starts a worker (apps/worker/main.cc parses it).
#pragma once

#include <string>

namespace kforge::worker {

struct WorkerArgs {
  std::string role;     // "harness" | "candidate"
  int channel_fd = 3;   // the socket to the coordinator
  int control_fd = 4;   // the control block shared by this rank group
  int mailbox_fd = -1;  // candidate: the timing mailbox shared with its harness rank
  int rank = 0;
  int world = 1;
  int device = 0;
  bool emulated = false;  // ranks share GPUs: built-in collectives
  bool nccl = false;  // candidate: it will start NCCL (keeps the host network for its bootstrap)
  std::string candidate_dir;  // candidate: the only directory it may read its kernel from
  std::string mps_dir;        // the MPS pipe directory, when ranks run under MPS
  bool profile = false;       // candidate: load the range profiler before the sandbox seals it
};

}  // namespace kforge::worker
