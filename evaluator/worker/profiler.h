// Hardware counters of a candidate's calls, through CUPTI's range profiler,
// loaded into the process only when a profile is asked for (dlopen of
// libcupti.so, like NCCL in nccl_api.h). Nsight Compute cannot be used here:
// its injection talks to its front end over sockets, which the sandbox
// refuses; the range profiler runs in the process itself.
//
// Everything that reads files or asks the driver for the chip's counters
// happens in Create(), before the worker seals itself with seccomp. Each
// profiled call is one pass of one range ("kf_run"); the metrics are chosen
// so that their passes fit the calls the coordinator drives.
//
// What it measures comes from the candidate's own process, so it is advice
// for the model, never part of a verdict or a timing (docs/integrity.md).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::worker {

class RangeProfiler {
 public:
  // Loads CUPTI, enables range profiling on the current CUDA context and
  // builds a configuration of the `wanted` metrics this GPU offers that needs
  // at most `max_passes` passes (kept in order: the first that fit). Fails
  // (kNotFound / kRuntimeError, naming the CUPTI call) where the library, the
  // GPU or the driver's permissions refuse.
  static Result<std::unique_ptr<RangeProfiler>> Create(const std::vector<std::string>& wanted,
                                                       int max_passes);
  ~RangeProfiler();
  RangeProfiler(const RangeProfiler&) = delete;
  RangeProfiler& operator=(const RangeProfiler&) = delete;

  const std::vector<std::string>& metrics() const;
  // The wanted metrics left out, each with why (unknown here, or passes).
  const std::vector<std::pair<std::string, std::string>>& dropped() const;
  int passes() const;
  // Whether every pass has been collected (further calls are not profiled).
  bool done() const;

  // Around one call: Begin starts a pass and its range, End closes both.
  Status Begin();
  Status End();

  // Decodes the passes and evaluates every metric of the range.
  Result<std::vector<std::pair<std::string, double>>> Values();

 private:
  struct State;
  explicit RangeProfiler(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace kforge::worker
