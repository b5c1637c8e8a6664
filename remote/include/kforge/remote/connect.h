// A run's remote slots: every evaluation server it was pointed at (URLs, or
// a rendezvous directory), asked what it offers, checked against the run,
// and turned into one EvalPort per slot.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/evaluator/service.h"
#include "kforge/remote/client.h"

namespace kforge::remote {

struct Endpoint {
  std::string url;
  std::filesystem::path registration;  // set when found through a rendezvous file
};

// The endpoints registered in a rendezvous directory (rendezvous.h).
std::vector<Endpoint> EndpointsIn(const std::filesystem::path& dir);

struct ConnectOptions {
  std::string token;
  std::string task_suite_hash;  // the coordinator's (TaskSuiteHash)
  int world = 2;                // the run's world size
  bool need_gpu = true;         // false: a compile-only run (GPU slots are not used)
  double job_timeout_s = 4 * 3600;
  double liveness_s = eval::kDefaultEvaluatorLivenessS;  // RemotePortOptions::liveness_s
  double info_timeout_s = 10;
};

struct RemoteSlots {
  // One port per slot, interleaved across servers (server 0's first slot,
  // server 1's first, ..., server 0's second, ...): the scheduler fills the
  // lowest free slot first, so work spreads over servers by their capacity.
  std::vector<std::unique_ptr<eval::EvalService>> gpu, compile;
  std::vector<std::string> gpu_names, compile_names;    // "URL (gpu slot 0)", by index
  std::vector<std::string> gpu_groups, compile_groups;  // the server's URL, by index
  std::vector<ServerInfo> servers;
  nlohmann::json hardware;  // the first GPU server's card; null when none has GPUs
};

// Asks every endpoint's /v1/info and refuses, naming the server, one that
// cannot be reached, refuses the token, has another task suite or kforge
// version, or whose GPU sets are for another world size (when GPUs are
// needed). kInvalidInput when no endpoint is given.
Result<RemoteSlots> ConnectEvaluators(const std::vector<Endpoint>& endpoints,
                                      const ConnectOptions& options);

}  // namespace kforge::remote
