// The client side of `kforge eval-server`: what a server offers, and an
// eval::EvalService that evaluates on it. The coordinator adds one such
// service per remote slot to the run's pools (connect.h); the agent sees only
// the evaluator's service interface.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/evaluator/service.h"

namespace kforge::remote {

// What GET /v1/info said.
struct ServerInfo {
  std::string url;
  std::string kforge_version;
  std::string task_suite_hash;
  std::string host;
  int world = 0;  // the world size of its GPU sets
  int gpu_slots = 0;
  int compile_slots = 0;
  nlohmann::json hardware;  // the server's hardware card; null: none (no GPU)
  nlohmann::json raw;       // the whole document
};

// kAuth when the server refuses the token, kTransport/kTimeout when it cannot
// be reached, kInvalidInput when the answer is not a kforge.eval_server/1
// document. `url` is the server's base URL (http://host:port).
Result<ServerInfo> FetchServerInfo(const std::string& url, const std::string& token,
                                   double timeout_s = 10);

struct RemotePortOptions {
  std::string url;  // the server's base URL
  // When set, the server's current URL is read from this rendezvous file
  // before every job: a server that Slurm requeued onto another node (or
  // another port) rewrites its file, and the port follows it.
  std::filesystem::path registration;
  std::string token;
  std::string task_suite_hash;
  double timeout_s = 4 * 3600;  // one job, queueing on the server included
  // While a job is in flight the server's /v1/healthz is asked over other
  // connections; when it has not answered for this long the job is given up
  // as kSlotLost (the server is stopped, wedged or cut off). 0: never.
  double liveness_s = eval::kDefaultEvaluatorLivenessS;
  std::string label;  // names the slot in messages ("host:port gpu slot 1")
};

// Evaluate() POSTs the job and returns the server's kforge.eval/1 document.
// Errors, for the run to branch on:
//   kSlotLost     the slot could not run it now: unreachable, connection
//                 cut mid-job (the server died), no health answer for
//                 liveness_s (stopped, wedged or cut off), timeout, 5xx, 429 or 503
//                 (retry_after_s() carries Retry-After): run it elsewhere;
//   kAuth         the token was refused;
//   kInvalidInput the job or this client does not fit the server (task
//                 suite or version mismatch, world size, upload limit);
//   kNotFound     the server has no such task.
// Thread-compatible like every EvalPort (one job at a time per port).
std::unique_ptr<eval::EvalService> MakeRemoteEvalService(RemotePortOptions options);

}  // namespace kforge::remote
