// The run scheduler: three pools of slots (model calls, compiles, GPU
// evaluations) and the executors that run work in them.
//
// The scheduler only decides: which ready job takes which free slot. Model
// calls are capped per model and overall and served round-robin across
// models; compiles and GPU evaluations are first come, first served. A GPU
// set runs one evaluation at a time (timing is exclusive), and a GPU set is
// never left idle while an evaluation is ready. A slot whose evaluator was
// lost (a remote server that died or turned the job away) can be suspended
// for a while; its jobs go to the other slots.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kforge/core/clock.h"

namespace kforge::agent {

enum class Pool { kLlm = 0, kCompile, kGpu };

struct PoolLimits {
  int llm_total = 16;     // model calls in flight, all models together
  int llm_per_model = 4;  // model calls in flight per model
  std::map<std::string, int> llm_model_override;
  int compile_slots = 2;  // concurrent compiles (CPU cores)
  int gpu_sets = 1;       // GPU sets, one evaluation each
};

struct ReadyJob {
  uint64_t id = 0;
  Pool pool = Pool::kLlm;
  std::string lane;  // the model, for kLlm
};

struct Dispatch {
  uint64_t id = 0;
  Pool pool = Pool::kLlm;
  int slot = 0;  // the GPU set for kGpu, the compile slot for kCompile
};

class Scheduler {
 public:
  Scheduler(PoolLimits limits, const Clock& clock);

  void Enqueue(const ReadyJob& job);
  // Assigns free slots to ready jobs; call after every Enqueue/Release batch.
  std::vector<Dispatch> DispatchReady();
  void Release(uint64_t id);
  // Takes a compile or GPU slot out of dispatch until `until` (its evaluator
  // was lost); a job already running there is unaffected.
  void Suspend(Pool pool, int slot, Clock::TimePoint until);
  // The earliest time a suspended slot comes back while jobs of its pool
  // wait: when the runner must look again even if nothing finishes.
  std::optional<Clock::TimePoint> NextResume() const;

  size_t queued(Pool pool) const;
  int busy(Pool pool) const;
  // True when some GPU set is free while an evaluation waits (never after DispatchReady).
  bool GpuIdleWhileReady() const;  // suspended sets are not idle
  // Seconds each GPU set has spent evaluating so far.
  std::vector<double> GpuBusySeconds() const;
  const PoolLimits& limits() const { return limits_; }

 private:
  int ModelCap(const std::string& model) const;
  bool Suspended(Pool pool, size_t slot) const;

  PoolLimits limits_;
  const Clock& clock_;
  std::deque<ReadyJob> compile_q_, gpu_q_;
  std::map<std::string, std::deque<ReadyJob>> llm_q_;  // per model
  std::string last_model_;                             // round-robin cursor
  std::map<std::string, int> llm_busy_;
  int llm_busy_total_ = 0;
  std::vector<bool> compile_busy_;
  std::vector<std::optional<Clock::TimePoint>> gpu_started_;
  std::vector<double> gpu_busy_s_;
  std::vector<std::optional<Clock::TimePoint>> compile_until_, gpu_until_;  // suspended until
  std::map<uint64_t, Dispatch> running_;
  std::map<uint64_t, std::string> running_model_;
};

// Runs jobs. `work` returns the seconds the job reported taking (a model
// call's latency, an evaluation's duration); a simulated executor uses it to
// advance fake time, a real one ignores it.
class Executor {
 public:
  virtual ~Executor() = default;
  virtual void Start(uint64_t id, Pool pool, std::function<double()> work) = 0;
  // Waits until a started job finishes or `until` passes; returns the ids of
  // the jobs that finished (possibly none).
  virtual std::vector<uint64_t> Wait(std::optional<Clock::TimePoint> until) = 0;
  virtual size_t in_flight() const = 0;
};

// One thread per job; Wait blocks on the real clock. A job of a pool with CPUs
// listed in `cpus_by_pool` ([pool] -> CPU ids, empty: any) runs pinned to them,
// and so does every process it starts.
std::unique_ptr<Executor> MakeThreadExecutor(std::vector<std::vector<int>> cpus_by_pool = {});

// Discrete-event simulation on a FakeClock: work runs at Start, completes at
// start + its reported seconds (plus `extra(pool)` when given); Wait advances
// the clock to the next completion. Deterministic.
std::unique_ptr<Executor> MakeSimExecutor(FakeClock& clock,
                                          std::function<double(Pool)> extra_seconds = {});

}  // namespace kforge::agent
