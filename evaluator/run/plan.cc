// Planning an evaluation and the harness group's part of it: the sizes, the
// arenas, the baseline, and the baseline's timing before and after the
// candidate (docs/methodology.md).
#include <algorithm>
#include <chrono>
#include <filesystem>

#include "kforge/core/log.h"
#include "protocol/layout.h"
#include "protocol/messages.h"
#include "run/stats.h"
#include "session.h"

namespace kforge::eval {

using nlohmann::json;

EvalSession::~EvalSession() { StopCandidate(*this); }

Status GroupFailed(EvalSession& s, const WorkerGroup& g, const Status& st) {
  const GroupFailure& f = g.last_failure();
  if (st.kind() == ErrorKind::kDeadlock) {
    s.failure = {{"phase", f.phase}, {"deadline_s", f.deadline_s}, {"hung_ranks", f.hung_ranks}};
  } else {
    s.failure = {{"phase", f.phase.empty() ? "setup" : f.phase},
                 {"rank", f.rank},
                 {"ranks", f.failed_ranks.empty() ? std::vector<int>{f.rank} : f.failed_ranks},
                 {"message", st.message()}};
  }
  return st;
}

Result<std::vector<Message>> Exchange(EvalSession& s, WorkerGroup& g, const json& msg,
                                      double deadline_s, const std::string& phase) {
  auto r = g.All(msg, deadline_s, phase);
  if (!r.ok()) return GroupFailed(s, g, r.status());
  return r;
}

Status PlanSizes(EvalSession& s) {
  for (const auto& size : s.task->check_sizes) {
    KF_ASSIGN_OR_RETURN(Problem p, Instantiate(*s.task, s.world, s.dtype, size, true));
    s.plans.push_back({size, std::move(p), true});
  }
  for (const auto& size : s.task->bench_sizes) {
    const auto& only = s.options->bench_sizes;
    if (!only.empty() && std::find(only.begin(), only.end(), size.label) == only.end()) continue;
    KF_ASSIGN_OR_RETURN(Problem p, Instantiate(*s.task, s.world, s.dtype, size, false));
    SizePlan plan{size, std::move(p), false};
    size_t per_set = 0;
    for (const auto& t : plan.problem.inputs) per_set += t.nbytes;
    for (const auto& t : plan.problem.outputs) per_set += t.nbytes;
    // Rotate through enough sets that consecutive calls never find their data
    // in L2 (at least 3x its size), capped to bound memory.
    plan.sets = static_cast<int>(
        std::clamp<size_t>((3 * s.l2_bytes + per_set - 1) / std::max<size_t>(per_set, 1), 1, 64));
    if (!s.options->timing) plan.sets = 1;
    s.plans.push_back(std::move(plan));
  }
  return Status::Ok();
}

Status PrepareHarness(EvalSession& s, const std::filesystem::path& baseline) {
  proto::AllocRequest alloc;
  for (const SizePlan& plan : s.plans) {
    alloc.private_bytes = std::max(
        alloc.private_bytes, proto::ComputeLayout(plan.problem, plan.sets, s.emulated, true).total);
    alloc.candidate_bytes =
        std::max(alloc.candidate_bytes,
                 proto::ComputeLayout(plan.problem, plan.sets, s.emulated, false).total);
  }
  const double dl = s.options->setup_deadline_s;
  WorkerGroup& h = *s.harness;
  KF_ASSIGN_OR_RETURN(auto allocated, Exchange(s, h, alloc.ToJson(), dl, "setup"));
  proto::PeersRequest peers;
  for (int r = 0; r < s.world; ++r) {
    KF_ASSIGN_OR_RETURN(
        proto::AllocReply a,
        proto::AllocReply::Parse(allocated[r].body, "alloc reply of rank " + std::to_string(r)));
    peers.private_handles.push_back(a.private_handle);
    peers.candidate_handles.push_back(a.candidate_handle);
  }
  s.candidate_handles = peers.candidate_handles;
  KF_RETURN_IF_ERROR(Exchange(s, h, peers.ToJson(), dl, "setup").status());
  auto loaded =
      h.All(proto::PathRequest{baseline.string()}.ToJson(proto::op::kLoadBaseline), dl, "load");
  if (!loaded.ok()) {
    Status st = GroupFailed(s, h, loaded.status());
    return Error(ErrorKind::kHarness, "loading the baseline: " + st.message());
  }
  return Status::Ok();
}

namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

json Configure(const EvalSession& s, const SizePlan& plan, bool collectives) {
  proto::ConfigureRequest c;
  c.problem = plan.problem;
  c.sets = plan.sets;
  c.emulated = s.emulated;
  c.collectives = collectives;
  return c.ToJson();
}

json FreshInputs(EvalSession& s, const std::vector<int>& sets) {
  proto::InputsRequest in;
  for (int set : sets) in.seeds.push_back({set, s.NewSeed()});
  return in.ToJson();
}

std::vector<int> AllSets(int sets) {
  std::vector<int> v(static_cast<size_t>(sets));
  for (int k = 0; k < sets; ++k) v[static_cast<size_t>(k)] = k;
  return v;
}

// `calls` calls rotating through the sets, after `warmup` untimed ones; the
// GPUs' clocks around them go to the plan unless this is the probe.
Result<std::vector<double>> TimeOnce(EvalSession& s, SizePlan& plan, int warmup, int calls,
                                     bool record_clocks = true) {
  WorkerGroup& h = *s.harness;
  proto::TimeBaselineRequest req;
  for (int k = 0; k < calls; ++k) req.order.push_back(k % plan.sets);
  req.warmup = warmup;
  auto timed = h.All(req.ToJson(), s.options->timing_deadline_s, "baseline timing");
  if (!timed.ok()) {
    Status st = GroupFailed(s, h, timed.status());
    return Error(ErrorKind::kHarness, "timing the baseline: " + st.message());
  }
  std::vector<std::vector<double>> by_rank;
  for (int r = 0; r < s.world; ++r) {
    KF_ASSIGN_OR_RETURN(
        proto::CallTimes t,
        proto::CallTimes::Parse((*timed)[r].body, "baseline times of rank " + std::to_string(r),
                                static_cast<size_t>(calls)));
    by_rank.push_back(std::move(t.event_us));
    if (record_clocks) {
      plan.sm_clock_mhz.insert(plan.sm_clock_mhz.end(), t.sm_clock_mhz.begin(),
                               t.sm_clock_mhz.end());
      plan.temperature_c.insert(plan.temperature_c.end(), t.temperature_c.begin(),
                                t.temperature_c.end());
    }
  }
  return MaxOverRanks(by_rank);
}

}  // namespace

json ConfigureMessage(const EvalSession& s, const SizePlan& plan, bool collectives) {
  return Configure(s, plan, collectives);
}
json InputsMessage(EvalSession& s, const std::vector<int>& sets) { return FreshInputs(s, sets); }

Status TimeBaselines(EvalSession& s, bool after) {
  if (!s.options->timing) return Status::Ok();
  WorkerGroup& h = *s.harness;
  const double dl = s.options->setup_deadline_s;
  for (SizePlan& plan : s.plans) {
    if (plan.check) continue;
    for (const json& msg : {Configure(s, plan, true), json{{"op", proto::op::kSetup}},
                            FreshInputs(s, AllSets(plan.sets))}) {
      auto r = h.All(msg, dl, "baseline timing");
      if (!r.ok()) {
        Status st = GroupFailed(s, h, r.status());
        return Error(ErrorKind::kHarness, "preparing the baseline: " + st.message());
      }
    }
    const TimingRule rule = s.Rule();
    if (!after) {
      // A short probe: the wall time of one call sizes the warm-up and the blocks.
      auto p0 = std::chrono::steady_clock::now();
      KF_RETURN_IF_ERROR(TimeOnce(s, plan, 2, 3, false).status());
      plan.call_wall_us = SecondsSince(p0) * 1e6 / 5;
      plan.warmup = WarmupCalls(rule, plan.call_wall_us);
    }
    std::vector<double> times;
    double spent_s = 0;
    int warmup = plan.warmup;
    for (int block; (block = NextBlock(rule, times, spent_s, plan.call_wall_us)) > 0;) {
      auto b0 = std::chrono::steady_clock::now();
      KF_ASSIGN_OR_RETURN(auto more, TimeOnce(s, plan, warmup, block));
      const double took = SecondsSince(b0);
      spent_s += took;
      plan.call_wall_us = took * 1e6 / (warmup + block);
      warmup = 0;
      times.insert(times.end(), more.begin(), more.end());
    }
    (after ? plan.baseline_after_us : plan.baseline_before_us) = Quantile(times, 0.5);
    plan.baseline_us.insert(plan.baseline_us.end(), times.begin(), times.end());
    KF_RETURN_IF_ERROR(
        Exchange(s, h, {{"op", proto::op::kTeardown}}, dl, "baseline timing").status());
  }
  return Status::Ok();
}

}  // namespace kforge::eval
