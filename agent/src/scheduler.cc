#include "kforge/agent/scheduler.h"

#include <algorithm>
#include <cassert>
#include <chrono>

namespace kforge::agent {

Scheduler::Scheduler(PoolLimits limits, const Clock& clock)
    : limits_(std::move(limits)),
      clock_(clock),
      compile_busy_(std::max(1, limits_.compile_slots), false),
      gpu_started_(std::max(0, limits_.gpu_sets)),
      gpu_busy_s_(std::max(0, limits_.gpu_sets), 0.0),
      compile_until_(compile_busy_.size()),
      gpu_until_(gpu_started_.size()) {}

bool Scheduler::Suspended(Pool pool, size_t slot) const {
  const auto& until = pool == Pool::kGpu ? gpu_until_ : compile_until_;
  return slot < until.size() && until[slot] && *until[slot] > clock_.Now();
}

void Scheduler::Suspend(Pool pool, int slot, Clock::TimePoint until) {
  auto& v = pool == Pool::kGpu ? gpu_until_ : compile_until_;
  if (pool == Pool::kLlm || slot < 0 || static_cast<size_t>(slot) >= v.size()) return;
  v[slot] = until;
}

std::optional<Clock::TimePoint> Scheduler::NextResume() const {
  std::optional<Clock::TimePoint> next;
  const auto now = clock_.Now();
  auto scan = [&](const std::vector<std::optional<Clock::TimePoint>>& until, bool waiting) {
    if (!waiting) return;
    for (const auto& t : until) {
      if (t && *t > now && (!next || *t < *next)) next = *t;
    }
  };
  scan(compile_until_, !compile_q_.empty());
  scan(gpu_until_, !gpu_q_.empty());
  return next;
}

int Scheduler::ModelCap(const std::string& model) const {
  auto it = limits_.llm_model_override.find(model);
  return it != limits_.llm_model_override.end() ? it->second : limits_.llm_per_model;
}

void Scheduler::Enqueue(const ReadyJob& job) {
  switch (job.pool) {
    case Pool::kLlm:
      llm_q_[job.lane].push_back(job);
      break;
    case Pool::kCompile:
      compile_q_.push_back(job);
      break;
    case Pool::kGpu:
      gpu_q_.push_back(job);
      break;
  }
}

std::vector<Dispatch> Scheduler::DispatchReady() {
  std::vector<Dispatch> out;
  // GPU first: an idle GPU is the most expensive thing in the room.
  for (size_t set = 0; set < gpu_started_.size() && !gpu_q_.empty(); ++set) {
    if (gpu_started_[set] || Suspended(Pool::kGpu, set)) continue;
    Dispatch d{gpu_q_.front().id, Pool::kGpu, static_cast<int>(set)};
    gpu_q_.pop_front();
    gpu_started_[set] = clock_.Now();
    running_[d.id] = d;
    out.push_back(d);
  }
  for (size_t slot = 0; slot < compile_busy_.size() && !compile_q_.empty(); ++slot) {
    if (compile_busy_[slot] || Suspended(Pool::kCompile, slot)) continue;
    Dispatch d{compile_q_.front().id, Pool::kCompile, static_cast<int>(slot)};
    compile_q_.pop_front();
    compile_busy_[slot] = true;
    running_[d.id] = d;
    out.push_back(d);
  }
  // Model calls: round-robin over models, starting after the last one served.
  while (llm_busy_total_ < limits_.llm_total) {
    bool served = false;
    auto start = llm_q_.upper_bound(last_model_);
    for (size_t n = 0; n < llm_q_.size(); ++n) {
      if (start == llm_q_.end()) start = llm_q_.begin();
      auto& [model, q] = *start;
      if (!q.empty() && llm_busy_[model] < ModelCap(model)) {
        Dispatch d{q.front().id, Pool::kLlm, 0};
        q.pop_front();
        ++llm_busy_[model];
        ++llm_busy_total_;
        running_[d.id] = d;
        running_model_[d.id] = model;
        last_model_ = model;
        out.push_back(d);
        served = true;
        break;
      }
      ++start;
    }
    if (!served) break;
  }
  return out;
}

void Scheduler::Release(uint64_t id) {
  auto it = running_.find(id);
  if (it == running_.end()) return;
  const Dispatch d = it->second;
  running_.erase(it);
  switch (d.pool) {
    case Pool::kLlm: {
      auto m = running_model_.find(id);
      --llm_busy_[m->second];
      --llm_busy_total_;
      running_model_.erase(m);
      break;
    }
    case Pool::kCompile:
      compile_busy_[d.slot] = false;
      break;
    case Pool::kGpu: {
      auto& started = gpu_started_[d.slot];
      gpu_busy_s_[d.slot] += std::chrono::duration<double>(clock_.Now() - *started).count();
      started.reset();
      break;
    }
  }
}

size_t Scheduler::queued(Pool pool) const {
  switch (pool) {
    case Pool::kLlm: {
      size_t n = 0;
      for (const auto& [m, q] : llm_q_) n += q.size();
      return n;
    }
    case Pool::kCompile:
      return compile_q_.size();
    case Pool::kGpu:
      return gpu_q_.size();
  }
  return 0;
}

int Scheduler::busy(Pool pool) const {
  switch (pool) {
    case Pool::kLlm:
      return llm_busy_total_;
    case Pool::kCompile:
      return static_cast<int>(std::count(compile_busy_.begin(), compile_busy_.end(), true));
    case Pool::kGpu:
      return static_cast<int>(std::count_if(gpu_started_.begin(), gpu_started_.end(),
                                            [](const auto& s) { return s.has_value(); }));
  }
  return 0;
}

bool Scheduler::GpuIdleWhileReady() const {
  if (gpu_q_.empty()) return false;
  for (size_t set = 0; set < gpu_started_.size(); ++set) {
    if (!gpu_started_[set] && !Suspended(Pool::kGpu, set)) return true;
  }
  return false;
}

std::vector<double> Scheduler::GpuBusySeconds() const {
  std::vector<double> out = gpu_busy_s_;
  for (size_t i = 0; i < gpu_started_.size(); ++i) {
    if (gpu_started_[i])
      out[i] += std::chrono::duration<double>(clock_.Now() - *gpu_started_[i]).count();
  }
  return out;
}

}  // namespace kforge::agent
