// What `kforge slurm up` and `kforge run --slurm` share: completing the Slurm
// options (this binary, absolute paths, the servers' tokens file) and the
// progress lines.
#pragma once

#include <filesystem>
#include <string>

#include "kforge/core/status.h"
#include "kforge/remote/slurm.h"

namespace kforge::cli {

// Fills in what flags do not give: the kforge the nodes run (this one),
// absolute run and tasks directories (`tasks_dir_flag` as every command reads
// it), and the tokens file: `tokens_flag`, or <run_dir>/slurm/tokens, made
// with a fresh token when missing. `*tokens_file` is the file this machine's
// client reads too.
Status CompleteSlurmOptions(remote::SlurmOptions* options, const std::string& tokens_flag,
                            const std::string& tasks_dir_flag, std::filesystem::path* tokens_file);

// Real processes and the real clock; progress as "kforge COMMAND: ..." on stderr.
remote::SlurmDeps CliSlurmDeps(const std::string& command);

}  // namespace kforge::cli
