// Planning an evaluation and the harness group's part of it: the sizes, the
// arenas and the baseline (docs/methodology.md).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "kforge/core/log.h"
#include "protocol/layout.h"
#include "protocol/messages.h"
#include "run/stats.h"
#include "run/trace.h"
#include "session.h"

namespace kforge::eval {

using nlohmann::json;

EvalSession::~EvalSession() {
  StopServed(*this, candidate);
  StopServed(*this, reference);
  for (int fd : candidate_arena_fds) close(fd);
}

Status GroupFailed(EvalSession& s, const WorkerGroup& g, const Status& st) {
  const GroupFailure& f = g.last_failure();
  if (st.kind() == ErrorKind::kDeadlock) {
    s.failure = {{"phase", f.phase}, {"deadline_s", f.deadline_s}, {"hung_ranks", f.hung_ranks}};
    if (s.budget_cut_deadline) {
      s.failure["candidate_budget_s"] = s.options->candidate_budget_s;
      return Error(ErrorKind::kDeadlock,
                   fmt::format("{} (the kernel's calls used up their budget of {:.0f} s of wall "
                               "time for the whole evaluation)",
                               st.message(), s.options->candidate_budget_s));
    }
  } else {
    s.failure = {{"phase", f.phase.empty() ? "setup" : f.phase},
                 {"rank", f.rank},
                 {"ranks", f.failed_ranks.empty() ? std::vector<int>{f.rank} : f.failed_ranks},
                 {"message", st.message()}};
  }
  return st;
}

namespace {

// Which of the evaluation's groups `g` is, for the exchange trace.
const char* GroupName(const EvalSession& s, const WorkerGroup& g) {
  if (&g == s.harness) return "harness";
  for (const ServedGroup* sg : {&s.candidate, &s.reference, &s.expert})
    if (sg->group.get() == &g) return sg->who.c_str();
  return "other";
}

}  // namespace

Result<std::vector<Message>> Exchange(EvalSession& s, WorkerGroup& g, const json& msg,
                                      double deadline_s, const std::string& phase) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = g.All(msg, deadline_s, phase);
  TraceExchange(GroupName(s, g), msg.value("op", ""), phase, t0);
  if (!r.ok()) return GroupFailed(s, g, r.status());
  return r;
}

Status PlanSizes(EvalSession& s) {
  const bool self_test = s.options->nccl_self_test;
  for (const auto& size : s.task->check_sizes) {
    KF_ASSIGN_OR_RETURN(Problem p, Instantiate(*s.task, s.world, s.dtype, size, true, self_test));
    s.plans.push_back({size, std::move(p), true});
  }
  for (const auto& size : s.task->bench_sizes) {
    const auto& only = s.options->bench_sizes;
    if (!only.empty() && std::find(only.begin(), only.end(), size.label) == only.end()) continue;
    KF_ASSIGN_OR_RETURN(Problem p, Instantiate(*s.task, s.world, s.dtype, size, false, self_test));
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
  // The candidate arena is split: every size's inputs (those that are not
  // also outputs) fit its first part, which candidates map read-only.
  proto::AllocRequest alloc;
  for (const SizePlan& plan : s.plans) {
    alloc.candidate_readonly_bytes = std::max(alloc.candidate_readonly_bytes,
                                              proto::ReadOnlyInputBytes(plan.problem, plan.sets));
  }
  for (const SizePlan& plan : s.plans) {
    alloc.private_bytes = std::max(
        alloc.private_bytes, proto::ComputeLayout(plan.problem, plan.sets, s.emulated, true).total);
    alloc.candidate_bytes =
        std::max(alloc.candidate_bytes, proto::ComputeLayout(plan.problem, plan.sets, s.emulated,
                                                             false, alloc.candidate_readonly_bytes)
                                            .total);
  }
  const double dl = s.options->setup_deadline_s;
  WorkerGroup& h = *s.harness;
  // No candidate code exists yet: whatever fails here is kforge's (most often
  // sizes that do not fit the GPU, above all when ranks share one), never the
  // kernel's.
  auto allocated = Exchange(s, h, alloc.ToJson(), dl, "setup");
  if (!allocated.ok()) {
    const double gib = static_cast<double>(alloc.private_bytes + alloc.candidate_bytes) /
                       static_cast<double>(1ull << 30);
    return Error(ErrorKind::kHarness,
                 fmt::format("the harness could not allocate {:.1f} GiB per rank for the "
                             "evaluation's sizes ({} ranks{}): {} (evaluate fewer or smaller bench "
                             "sizes with --bench-size, or on more GPUs)",
                             gib, s.world, s.emulated ? " sharing one GPU" : "",
                             allocated.status().message()));
  }
  proto::PeersRequest peers;
  for (int r = 0; r < s.world; ++r) {
    Message& m = (*allocated)[r];
    // The descriptors are the session's from here on, whatever follows.
    s.candidate_arena_fds.insert(s.candidate_arena_fds.end(), m.fds.begin(), m.fds.end());
    const size_t fds = m.fds.size();
    m.fds.clear();
    KF_ASSIGN_OR_RETURN(
        proto::AllocReply a,
        proto::AllocReply::Parse(m.body, "alloc reply of rank " + std::to_string(r)));
    if (fds != (a.candidate.split() ? 2u : 0u) ||
        (r > 0 && a.candidate.readonly_bytes != s.candidate_arenas[0].readonly_bytes)) {
      return Error(ErrorKind::kHarness, "alloc reply of rank " + std::to_string(r) +
                                            ": its candidate arena is not shared like rank 0's");
    }
    peers.private_handles.push_back(a.private_handle);
    s.candidate_arenas.push_back(a.candidate);
    if (r == 0) s.readonly_refused = a.readonly_refused;
  }
  if (Status st = Exchange(s, h, peers.ToJson(), dl, "setup").status(); !st.ok())
    return Error(ErrorKind::kHarness, "mapping the ranks' memory: " + st.message());
  auto loaded =
      h.All(proto::PathRequest{baseline.string()}.ToJson(proto::op::kLoadBaseline), dl, "load");
  if (!loaded.ok()) {
    Status st = GroupFailed(s, h, loaded.status());
    return Error(ErrorKind::kHarness, "loading the baseline: " + st.message());
  }
  return Status::Ok();
}

namespace {

// What every group's configure says of a size: its problem, sets, backend
// and the candidate arena's read-only part, which every rank's layout uses.
proto::ConfigureRequest ConfigureFor(const EvalSession& s, const SizePlan& plan, bool collectives) {
  proto::ConfigureRequest c;
  c.problem = plan.problem;
  c.sets = plan.sets;
  c.emulated = s.emulated;
  c.collectives = collectives;
  c.readonly_bytes = s.candidate_arenas.empty() ? 0 : s.candidate_arenas[0].readonly_bytes;
  return c;
}

}  // namespace

json ConfigureMessage(const EvalSession& s, const SizePlan& plan, bool collectives) {
  return ConfigureFor(s, plan, collectives).ToJson();
}

json HarnessConfigureMessage(const EvalSession& s, const SizePlan& plan) {
  proto::ConfigureRequest c = ConfigureFor(s, plan, /*collectives=*/true);
  if (!plan.check) c.rms_vs_baseline = RmsVsBaseline(s, plan.problem);
  return c.ToJson();
}

json InputsMessage(EvalSession& s, const std::vector<int>& sets) {
  proto::InputsRequest in;
  for (int set : sets) in.seeds.push_back({set, s.NewSeed()});
  return in.ToJson();
}

}  // namespace kforge::eval
