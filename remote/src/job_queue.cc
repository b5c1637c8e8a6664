#include "job_queue.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <string>

#include "kforge/evaluator/slots.h"

namespace kforge::remote {
namespace {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

JobQueue::JobQueue(JobQueueOptions options, std::vector<std::unique_ptr<eval::EvalService>> gpu,
                   std::vector<std::unique_ptr<eval::EvalService>> compile)
    : options_(options) {
  gpu_.slots = std::move(gpu);
  compile_.slots = std::move(compile);
  for (size_t i = 0; i < gpu_.slots.size(); ++i)
    workers_.emplace_back([this, i] { Work(false, static_cast<int>(i)); });
  for (size_t i = 0; i < compile_.slots.size(); ++i)
    workers_.emplace_back([this, i] { Work(true, static_cast<int>(i)); });
}

JobQueue::~JobQueue() {
  Drain();
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_cv_.NotifyAll();
  for (auto& t : workers_) t.join();
}

Admission JobQueue::Submit(const eval::EvalRequest& job, int token,
                           std::future<Result<nlohmann::json>>* answer) {
  MutexLock lock(&mu_);
  if (draining_) return Admission::kDraining;
  Pool& pool = job.compile_only ? compile_ : gpu_;
  if (pool.slots.empty()) return Admission::kNoSlot;
  if (options_.per_token > 0 && per_token_[token] >= options_.per_token)
    return Admission::kTokenLimit;
  // A job that a free slot takes at once does not wait; only waiting jobs
  // count against the queue.
  const bool waits =
      pool.running + static_cast<int>(pool.waiting.size()) >= static_cast<int>(pool.slots.size());
  if (waits && gpu_.waiting.size() + compile_.waiting.size() >= options_.max_queue)
    return Admission::kQueueFull;
  auto item = std::make_unique<Item>();
  item->job = job;
  item->token = token;
  item->queued_at = NowSeconds();
  *answer = item->answer.get_future();
  pool.waiting.push_back(std::move(item));
  ++per_token_[token];
  ++admitted_;
  work_cv_.NotifyAll();
  return Admission::kAdmitted;
}

void JobQueue::Work(bool compile, int slot) {
  eval::PinThisThread(compile ? options_.compile_cpus : options_.gpu_cpus);
  Pool& pool = compile ? compile_ : gpu_;
  MutexLock lock(&mu_);
  while (true) {
    work_cv_.Wait(lock, [&]() REQUIRES(mu_) { return stopping_ || !pool.waiting.empty(); });
    if (pool.waiting.empty()) return;  // stopping, nothing left
    std::unique_ptr<Item> item = std::move(pool.waiting.front());
    pool.waiting.pop_front();
    ++pool.running;
    lock.Unlock();
    const double started = NowSeconds();
    Result<nlohmann::json> doc = Error(ErrorKind::kInternal, "no result");
    try {
      doc = pool.slots[slot]->Evaluate(item->job);
    } catch (const std::exception& e) {
      // Errors are values; an exception here is a bug, answered as one.
      doc = Error(ErrorKind::kInternal, std::string("evaluator threw: ") + e.what());
    }
    const double seconds = NowSeconds() - started;
    if (doc.ok()) {
      (*doc)["evaluated_by"] = {{"pool", compile ? "compile" : "gpu"},
                                {"slot", slot},
                                {"queue_s", started - item->queued_at},
                                {"run_s", seconds}};
    }
    item->answer.set_value(std::move(doc));
    lock.Lock();
    --pool.running;
    pool.mean_seconds = pool.mean_seconds == 0 ? seconds : 0.8 * pool.mean_seconds + 0.2 * seconds;
    --per_token_[item->token];
    --admitted_;
    ++answered_;
    idle_cv_.NotifyAll();
  }
}

void JobQueue::Drain() {
  MutexLock lock(&mu_);
  draining_ = true;
  idle_cv_.Wait(lock, [&]() REQUIRES(mu_) { return admitted_ == 0; });
}

bool JobQueue::draining() const {
  MutexLock lock(&mu_);
  return draining_;
}

QueueStats JobQueue::Stats() const {
  MutexLock lock(&mu_);
  QueueStats s;
  s.gpu_slots = static_cast<int>(gpu_.slots.size());
  s.compile_slots = static_cast<int>(compile_.slots.size());
  s.gpu_running = gpu_.running;
  s.compile_running = compile_.running;
  s.gpu_waiting = gpu_.waiting.size();
  s.compile_waiting = compile_.waiting.size();
  s.answered = answered_;
  s.draining = draining_;
  return s;
}

int JobQueue::RetryAfterSeconds(bool compile_only) const {
  MutexLock lock(&mu_);
  const Pool& pool = compile_only ? compile_ : gpu_;
  const double mean = pool.mean_seconds > 0 ? pool.mean_seconds : 1.0;
  const double slots = std::max<size_t>(1, pool.slots.size());
  const double ahead = static_cast<double>(pool.waiting.size()) + pool.running;
  return static_cast<int>(std::clamp(std::ceil(mean * ahead / slots), 1.0, 300.0));
}

}  // namespace kforge::remote
