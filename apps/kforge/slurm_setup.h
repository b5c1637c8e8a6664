// What `kforge slurm up` and `kforge run --slurm` share: the Slurm options
// from flags, the servers' tokens file, and the progress lines.
#pragma once

#include <filesystem>
#include <string>

#include "kforge/core/status.h"
#include "kforge/remote/slurm.h"

namespace kforge::cli {

struct SlurmRequest {
  int nodes = 1;
  int gpus_per_node = 0;
  int cpus_per_node = 0;
  bool exclusive = false;
  std::string partition, time;
  std::string tokens;  // empty: <run_dir>/slurm/tokens, made when missing
  std::string tasks_dir;
  int world = 2;
  int compile_jobs = 0;
  double wait_s = 600;
  std::filesystem::path run_dir;
};

// The options for remote::SlurmUp; `*tokens_file` is the file the servers
// and this machine's client read (created with a fresh token when the
// default one is missing).
Result<remote::SlurmOptions> BuildSlurmOptions(const SlurmRequest& request,
                                               std::filesystem::path* tokens_file);

// Real processes and the real clock; progress as "kforge COMMAND: ..." on stderr.
remote::SlurmDeps CliSlurmDeps(const std::string& command);

}  // namespace kforge::cli
