// Running child processes with deadlines. The child gets its own process group
// so that a timeout kills everything it started (nvcc spawns cicc, ptxas, ...).
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kforge/core/status.h"

namespace kforge {

struct ProcessOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  std::filesystem::path cwd;               // empty: inherit
  std::map<std::string, std::string> env;  // added to (or overriding) the parent's environment
  // false: the child's environment is `env` alone, nothing of the parent's
  // (a long-lived helper that must not hold kforge's credentials).
  bool inherit_env = true;
  size_t max_output_bytes = 4 << 20;  // each of stdout/stderr is truncated past this
  int nice = 0;                       // > 0: the child runs at this lower CPU priority
};

struct ProcessResult {
  int exit_code = -1;      // valid when !signaled && !timed_out
  int term_signal = 0;     // the signal that ended the child, if any
  bool timed_out = false;  // the deadline passed and the group was killed
  std::string out;
  std::string err;
  double seconds = 0;
  bool Succeeded() const { return !timed_out && term_signal == 0 && exit_code == 0; }
};

// The seam for process execution: compile and probe code takes a ProcessRunner&.
class ProcessRunner {
 public:
  virtual ~ProcessRunner() = default;
  // Runs argv[0] (searched in PATH) to completion or deadline. A Status error
  // means the process could not be started at all (e.g. no such program).
  virtual Result<ProcessResult> Run(const std::vector<std::string>& argv,
                                    const ProcessOptions& options) = 0;
};

ProcessRunner& RealProcessRunner();

// Finds an executable in PATH; empty if absent.
std::filesystem::path FindInPath(const std::string& name);

}  // namespace kforge
