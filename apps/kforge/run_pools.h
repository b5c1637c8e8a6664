// The evaluators of `kforge run` when they are not this machine's: one port
// per slot of the eval-servers given by --evaluators / --evaluators-dir, or
// started by --slurm for the run's duration (agent::RemotePoolsFn).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "kforge/agent/run_config.h"
#include "kforge/agent/run_plan.h"
#include "kforge/core/status.h"

namespace kforge::cli {

// `suite_hash` is the coordinator's TaskSuiteHash; `run_dir` holds the
// rendezvous directory when --slurm starts servers. nullptr when the config
// names no remote evaluator (the run uses this machine's).
Result<std::unique_ptr<agent::EvalPools>> MakeRemotePools(const agent::RunConfig& cfg,
                                                          const std::string& suite_hash,
                                                          const std::filesystem::path& run_dir);

}  // namespace kforge::cli
