// The evaluators of `kforge run`: local (an evaluator per GPU set of this
// machine, compilers per CPU core) or remote (one port per slot of the
// eval-servers given by --evaluators / --evaluators-dir, or started by
// --slurm for the run's duration).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kforge/agent/ports.h"
#include "kforge/agent/run_config.h"
#include "kforge/core/status.h"

namespace kforge::eval {
struct Task;
}

namespace kforge::cli {

struct RunPools {
  std::vector<std::unique_ptr<agent::EvalPort>> owned;
  std::vector<agent::EvalPort*> gpu, compile;
  std::vector<std::string> gpu_names, compile_names;
  std::vector<std::string> gpu_groups, compile_groups;  // slots of one server share a group
  bool compile_only = false;
  std::string no_gpu_reason;                       // why compile_only, when it was not asked for
  nlohmann::json card = nlohmann::json::object();  // the probed (or a server's) hardware card
  bool remote = false;
  std::string where;  // "this machine" or "3 eval-server(s): ..."
  // Runs when the run is over (kforge slurm down for --slurm).
  std::function<void()> release;
  ~RunPools() {
    if (release) release();
  }
};

// `suite_hash` is the coordinator's TaskSuiteHash; `run_dir` holds the
// rendezvous directory when --slurm starts servers.
Result<std::unique_ptr<RunPools>> MakeRunPools(const agent::RunConfig& cfg,
                                               const std::vector<eval::Task>* tasks,
                                               const std::string& suite_hash,
                                               const std::filesystem::path& run_dir);

}  // namespace kforge::cli
