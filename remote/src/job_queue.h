// Internal: the eval-server's work, without HTTP. One worker thread per slot
// (a GPU set's evaluator, or a compile-only evaluator), a bounded queue in
// front of each pool, a cap on the jobs one token may have in flight, and a
// drain that answers every admitted job before it returns.
#pragma once

#include <deque>
#include <future>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "kforge/core/mutex.h"
#include "kforge/core/status.h"
#include "kforge/evaluator/service.h"

namespace kforge::remote {

struct JobQueueOptions {
  size_t max_queue = 64;                    // jobs waiting (not running), both pools together
  int per_token = 16;                       // jobs queued or running per token; 0: no cap
  std::vector<int> gpu_cpus, compile_cpus;  // the slots' threads are pinned here (empty: any)
};

enum class Admission { kAdmitted, kQueueFull, kTokenLimit, kDraining, kNoSlot };

struct QueueStats {
  int gpu_slots = 0, compile_slots = 0;
  int gpu_running = 0, compile_running = 0;
  size_t gpu_waiting = 0, compile_waiting = 0;
  uint64_t answered = 0;
  bool draining = false;
};

class JobQueue {
 public:
  // Takes the slots' evaluators; starts one worker thread per slot.
  JobQueue(JobQueueOptions options, std::vector<std::unique_ptr<eval::EvalService>> gpu,
           std::vector<std::unique_ptr<eval::EvalService>> compile);
  // Drains, then stops the workers.
  ~JobQueue();
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  // Queues the job for `token` (an index, for the per-token cap) or says why
  // not. Admitted: `*answer` becomes ready with the document (or the
  // evaluator's error) once a slot has run it. Compile-only jobs go to the
  // compile slots, others to the GPU slots.
  Admission Submit(const eval::EvalRequest& job, int token,
                   std::future<Result<nlohmann::json>>* answer);

  // Stops admitting (Submit says kDraining) and returns once every admitted
  // job has been answered.
  void Drain();
  bool draining() const;

  QueueStats Stats() const;
  // A client turned away for a full queue may retry after about this long:
  // the work ahead of it over the slots that will do it, from the average
  // duration of recent jobs; 1..300 s.
  int RetryAfterSeconds(bool compile_only) const;

 private:
  struct Item {
    eval::EvalRequest job;
    int token = 0;
    std::promise<Result<nlohmann::json>> answer;
    double queued_at = 0;
  };
  struct Pool {
    // Set by the constructor and never changed: a worker calls its slot
    // without the lock.
    std::vector<std::unique_ptr<eval::EvalService>> slots;
    std::deque<std::unique_ptr<Item>> waiting;
    int running = 0;
    double mean_seconds = 0;  // moving average of job durations
  };

  void Work(bool compile, int slot);

  const JobQueueOptions options_;
  mutable Mutex mu_;
  CondVar work_cv_, idle_cv_;
  Pool gpu_ GUARDED_BY(mu_);
  Pool compile_ GUARDED_BY(mu_);
  std::map<int, int> per_token_ GUARDED_BY(mu_);  // token -> jobs admitted and not answered
  int admitted_ GUARDED_BY(mu_) = 0;
  uint64_t answered_ GUARDED_BY(mu_) = 0;
  bool draining_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace kforge::remote
