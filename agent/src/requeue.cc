// Lost slots: an evaluation whose slot could not run it (ErrorKind::kSlotLost,
// e.g. a remote eval-server that died mid-job) goes back to the queue for
// another slot, and the slot sits out a cooldown. Each requeue is an event in
// the store; out of attempts, the session stops as a harness failure with the
// kernel unevaluated (a resume evaluates it), never as the kernel's fault.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "run_engine.h"

namespace kforge::agent::internal {

std::string RunEngine::SlotName(Pool pool, int slot) const {
  const bool compile = pool == Pool::kCompile;
  const auto& names = compile ? deps_.compiler_names : deps_.gpu_set_names;
  const size_t n = compile ? deps_.compilers.size() : deps_.gpu_sets.size();
  const size_t index = compile && n > 0 ? static_cast<size_t>(slot) % n : slot;
  if (index < names.size() && !names[index].empty()) return names[index];
  return fmt::format("{} slot {}", compile ? "compile" : "GPU", slot);
}

std::string RunEngine::SlotGroup(Pool pool, int slot) const {
  const bool compile = pool == Pool::kCompile;
  const auto& groups = compile ? deps_.compiler_groups : deps_.gpu_set_groups;
  const size_t n = compile ? deps_.compilers.size() : deps_.gpu_sets.size();
  const size_t index = compile && n > 0 ? static_cast<size_t>(slot) % n : slot;
  if (index < groups.size() && !groups[index].empty()) return "group " + groups[index];
  return fmt::format("{} {}", compile ? "compile" : "gpu", slot);
}

void RunEngine::OnSlotWorked(Pool pool, int slot) { slot_losses_.erase(SlotGroup(pool, slot)); }

Status RunEngine::OnSlotLost(SessionSlot& slot, const Job& job, const Status& lost) {
  Session& s = *slot.session;
  s.Unstart(job.candidate);
  const std::string group = SlotGroup(job.pool, job.slot);
  const int losses = ++slot_losses_[group];
  double cooldown = std::min(spec_.max_slot_cooldown_s,
                             spec_.slot_cooldown_s * std::pow(2.0, std::min(losses - 1, 30)));
  if (const auto asked = lost.retry_after_s())
    cooldown = std::max(cooldown, std::min(*asked, spec_.max_slot_cooldown_s));
  const Clock::TimePoint until = deps_.clock->Now() + std::chrono::duration_cast<Clock::Duration>(
                                                          std::chrono::duration<double>(cooldown));
  // The slot and every slot of its group (the same server, in both pools):
  // a dead server must not cost a job one attempt per slot it had.
  int rested = 0;
  for (Pool p : {Pool::kCompile, Pool::kGpu}) {
    const int slots = p == Pool::kCompile ? spec_.pools.compile_slots : spec_.pools.gpu_sets;
    for (int i = 0; i < slots; ++i) {
      if ((p == job.pool && i == job.slot) || SlotGroup(p, i) == group) {
        scheduler_.Suspend(p, i, until);
        ++rested;
      }
    }
  }
  const int attempts = ++slot.eval_attempts[job.candidate];
  const char* pool = job.pool == Pool::kCompile ? "compile" : "gpu";
  const std::string where = SlotName(job.pool, job.slot);
  nlohmann::json detail = {{"session", slot.id},
                           {"turn", job.candidate},
                           {"pool", pool},
                           {"slot", job.slot},
                           {"evaluator", where},
                           {"attempt", attempts},
                           {"kind", ErrorKindName(lost.kind())},
                           {"message", lost.message()},
                           {"slot_cooldown_s", cooldown},
                           {"slots_resting", rested}};
  if (attempts < spec_.max_eval_attempts) {
    KF_RETURN_IF_ERROR(deps_.store->AppendEvent(run_id_, "eval_requeued", detail));
    if (deps_.progress) {
      deps_.progress->Event(fmt::format(
          "{} {} turn {}: evaluation lost on {} ({}); requeued (attempt {} of {}), the slot "
          "rests {:.0f} s",
          s.spec().model, s.spec().task, job.candidate + 1, where, lost.message(), attempts + 1,
          spec_.max_eval_attempts, cooldown));
    }
    return Status::Ok();
  }
  KF_RETURN_IF_ERROR(deps_.store->AppendEvent(run_id_, "eval_abandoned", detail));
  const std::string reason = fmt::format(
      "harness: the evaluation was lost {} times (last on {}: {}); the kernel is "
      "not evaluated (resume to evaluate it)",
      attempts, where, lost.message());
  s.RequestStop(reason);
  if (deps_.progress) {
    deps_.progress->Event(
        fmt::format("{} {} turn {}: {}", s.spec().model, s.spec().task, job.candidate + 1, reason));
  }
  return Status::Ok();
}

}  // namespace kforge::agent::internal
