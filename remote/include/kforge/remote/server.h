// `kforge eval-server`: evaluations for other machines over authenticated
// HTTP (docs/scale.md). One evaluator per GPU set, one evaluation at a time
// each, plus compile-only slots; a bounded queue; bearer tokens; a drain that
// answers every job it admitted. Kernels run exactly as `kforge eval` runs
// them (the evaluator's sandbox); the server process never runs their code.
//
// Endpoints (JSON; every refusal is a kforge.error/1 body with a code):
//   GET  /v1/healthz   no token; 200 {"status":"ok"}, 503 while draining
//   GET  /v1/info      version, task-suite hash, slots, hardware card, queue
//   POST /v1/evaluate  kforge.eval_job/1 -> the kforge.eval/1 document
// Refusals: 401 no or wrong token (nothing is read or run), 413 a body over
// the upload limit, 429 + Retry-After a full queue or the token's cap, 409 a
// different task suite or kforge version, 404 an unknown task, 422 a job
// this server cannot run (no GPU slots, another world size), 503 +
// Retry-After while draining, 500 the evaluator failed (not the kernel).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/evaluator/service.h"
#include "kforge/remote/tokens.h"

namespace kforge::remote {

struct EvalServerOptions {
  std::string host = "127.0.0.1";  // the address to listen on
  int port = 0;                    // 0: any free port (EvalServer::port says which)
  // The host name in the URL that others are given (--register, stdout);
  // empty: `host`, or this machine's name when listening on every address.
  std::string advertise_host;
  std::vector<std::vector<int>> gpu_sets;  // one GPU slot each; empty: compile-only server
  int world = 0;                           // the world size GPU jobs must ask for
  int compile_slots = 1;                   // compile-only evaluations at once
  // The CPUs the GPU slots' and the compile slots' threads (and the processes
  // they start) are pinned to (kforge/evaluator/slots.h); empty: any.
  std::vector<int> gpu_cpus, compile_cpus;
  size_t max_queue = 64;              // jobs waiting, both pools together
  int per_token = 16;                 // jobs queued or running per token; 0: no cap
  size_t max_upload_bytes = 4 << 20;  // a request body larger than this is refused (413)
  std::string task_suite_hash;        // what clients must send
  std::string tasks_dir;              // for messages
  std::set<std::string> task_keys;    // the tasks jobs may name
  nlohmann::json hardware;            // the hardware card for /v1/info; null: none
  // Written (atomically) once the server accepts connections, removed when
  // it starts draining: {url, host, pid, slots, ...} (rendezvous.h).
  std::filesystem::path register_file;
};

// Makes the evaluator of one slot: a GPU set's (gpus non-empty) or a
// compile-only one (gpus empty).
using EvaluatorFactory =
    std::function<std::unique_ptr<eval::EvalService>(const std::vector<int>& gpus)>;

class EvalServer {
 public:
  // Binds the socket and makes every slot's evaluator; serves nothing yet.
  static Result<std::unique_ptr<EvalServer>> Start(const EvalServerOptions& options,
                                                   TokenSet tokens, EvaluatorFactory factory);
  ~EvalServer();
  EvalServer(const EvalServer&) = delete;
  EvalServer& operator=(const EvalServer&) = delete;

  int port() const;
  std::string url() const;  // http://ADVERTISED_HOST:PORT

  // Serves until a drain completes: writes the register file, answers
  // requests, and after RequestDrain() refuses new jobs (503), removes the
  // register file, finishes every admitted job, answers it, and returns.
  Status Run();
  // Thread-safe; not async-signal-safe (call it from a thread that waited for
  // the signal, as `kforge eval-server` does).
  void RequestDrain();

 private:
  struct Impl;
  explicit EvalServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kforge::remote
