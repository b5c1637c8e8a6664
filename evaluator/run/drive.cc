// Driving a served group's timed calls through the harness: blocks of
// rounds over the sets, each call staged, posted, timed on the harness's
// clock and verified (docs/methodology.md, "Candidate"), until the median is
// precise enough or the size's cap is spent.
#include "run/drive.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "protocol/messages.h"
#include "run/stats.h"
#include "run/trace.h"
#include "run/warm_groups.h"

namespace kforge::eval {

using nlohmann::json;

void AddFailures(const std::vector<proto::Failure>& failures, json* mismatches, bool with_call) {
  for (const auto& f : failures) {
    json m = f.report;
    if (with_call) m["call"] = f.set;
    mismatches->push_back(std::move(m));
  }
}

namespace {

// The reference and expert groups serve trusted code: whatever goes wrong in
// their calls is the harness's error, never a verdict on the candidate.
Status TrustedFailed(const ServedGroup& g, const SizePlan& plan, const std::string& what) {
  return Error(
      ErrorKind::kHarness,
      g.reference()
          ? "timing the baseline at size " + plan.size.label + ": the task's reference " + what
          : "timing the expert at size " + plan.size.label + ": the task's expert kernel " + what);
}

// The harness's drive of `g` failed (the harness group is dead: killed by
// its own failure, or by the watch when a served process exited). The served
// group is judged first (JudgeFailedDrive): a candidate's death is its
// runtime error, never a harness error; a harness rank's timeout is the
// candidate's too (it did not answer a call). For trusted code (the
// reference, the expert) every failure is kforge's. The next evaluation
// starts a fresh harness group (the evaluator's health-check path), as after
// any failure of it: a group abandoned mid-drive has ranks in barriers and
// calls whose state nothing could vouch for, and a fault under MPS may have
// reached its contexts.
Status DriveFailed(EvalSession& s, ServedGroup& g, const SizePlan& plan, const Status& driven) {
  const DriveFailure f = JudgeFailedDrive(*g.group, driven, "timing");
  if (g.trusted()) return TrustedFailed(g, plan, "was not driven: " + f.status.message());
  return GroupFailed(s, f.served_failed ? *g.group : *s.harness, f.status);
}

// KFORGE_TIMING_TRACE=FILE (diagnosis only): every driven block's wall and
// claimed time per rank and call, its SM clocks, and the served groups alive
// or waiting (counted only when tracing: the pool's count takes its lock).
void TraceBlock(const EvalSession& s, const ServedGroup& g, const SizePlan& plan,
                const std::vector<std::vector<double>>& wall,
                const std::vector<std::vector<double>>& claimed,
                const std::vector<std::vector<double>>& sm_clock_mhz, const json& split_us) {
  if (!Tracing(kTimingTrace)) return;
  int live_groups = s.warm_groups ? static_cast<int>(s.warm_groups->size()) : 0;
  for (const ServedGroup* sg : {&s.candidate, &s.reference, &s.expert})
    live_groups += sg->alive() ? 1 : 0;
  AppendTrace(kTimingTrace, json{{"size", plan.size.label},
                                 {"side", g.who},
                                 {"wall_us", wall},
                                 {"claimed_us", claimed},
                                 {"sm_clock_mhz", sm_clock_mhz},
                                 {"split_us", split_us},
                                 {"live_groups", live_groups}});
}

}  // namespace

// Rounds over every set in a fresh random order, fresh inputs and poison per
// round; the served group answers the calls through its mailboxes.
Status DriveBlock(EvalSession& s, ServedGroup& g, SizePlan& plan, int warmup, int calls, Side* out,
                  json* profile) {
  const int total = warmup + calls;
  proto::DriveRequest drive;
  drive.first_seq = g.next_seq;
  drive.warmup = warmup;
  // The candidate's calls count against its budget; trusted groups' do not.
  // (Counted until this function returns, its failures judged first.)
  CandidateTime clock(s, !g.trusted());
  const auto deadline = [&](double phase_s) { return clock.Deadline(phase_s); };
  drive.call_deadline_s = deadline(s.options->check_deadline_s);
  std::mt19937_64 shuffle(s.NewSeed());
  for (int done = 0; done < total;) {
    proto::DriveRequest::Round round;
    std::vector<int> order(static_cast<size_t>(plan.sets));
    for (int k = 0; k < plan.sets; ++k) order[static_cast<size_t>(k)] = k;
    std::shuffle(order.begin(), order.end(), shuffle);
    order.resize(static_cast<size_t>(std::min(plan.sets, total - done)));
    for (int set : order) round.seeds.push_back({set, s.NewSeed()});
    round.order = order;
    round.poison = s.NewPoison();
    done += static_cast<int>(order.size());
    drive.rounds.push_back(std::move(round));
  }
  g.next_seq += static_cast<uint64_t>(total);
  const auto t0 = std::chrono::steady_clock::now();
  WorkerGroup& served_group = *g.group;
  std::vector<json> serve(s.world, proto::ServeRequest{total, profile != nullptr}.ToJson());
  if (Status st = served_group.Post(serve, {}, "timing"); !st.ok())
    return GroupFailed(s, served_group, st);
  std::vector<std::vector<int>> fds;
  for (auto& m : g.mailboxes) fds.push_back({m.fd()});
  // The served group is watched while the harness drives it: a process of
  // it that exits ends the wait at once, not at the per-call deadline.
  auto driven = s.harness->Each(std::vector<json>(s.world, drive.ToJson()), fds,
                                deadline(s.options->timing_deadline_s), "timing", &served_group);
  if (!driven.ok()) return DriveFailed(s, g, plan, driven.status());
  auto served = served_group.Collect(deadline(s.options->check_deadline_s), "timing");
  if (!served.ok()) return GroupFailed(s, served_group, served.status());
  if (profile != nullptr) *profile = (*served)[0].body;
  TraceExchange(g.who, "drive " + std::to_string(total), plan.size.label, t0);

  json mismatches = json::array(), changed = json::array(), anomalies = json::array();
  std::vector<std::vector<double>> wall, claimed, clocks;
  json split = json::array();  // per rank: where its harness spent the drive
  for (int r = 0; r < s.world; ++r) {
    KF_ASSIGN_OR_RETURN(
        auto d, proto::DriveReply::Parse((*driven)[r].body, "drive", static_cast<size_t>(calls)));
    AddFailures(d.failures, &mismatches, true);
    for (const auto& [call, name] : d.inputs_changed)
      changed.push_back(json{{"rank", r}, {"input", name}, {"call", call}});
    for (const auto& a : d.anomalies) anomalies.push_back("rank " + std::to_string(r) + ": " + a);
    wall.push_back(std::move(d.wall_us));
    claimed.push_back(std::move(d.claimed_us));
    out->sm_clock_mhz.insert(out->sm_clock_mhz.end(), d.sm_clock_mhz.begin(), d.sm_clock_mhz.end());
    clocks.push_back(d.sm_clock_mhz);
    split.push_back(d.split.ToJson());
    out->temperature_c.insert(out->temperature_c.end(), d.temperature_c.begin(),
                              d.temperature_c.end());
  }
  if (!anomalies.empty()) {
    if (g.trusted())
      return TrustedFailed(g, plan, "broke the timing protocol: " + anomalies.dump());
    s.integrity.push_back(
        {{"check", "mailbox"}, {"size", plan.size.label}, {"message", anomalies}});
    return Error(ErrorKind::kIntegrityViolation,
                 "the candidate's process broke the timing protocol at size " + plan.size.label +
                     ": " + anomalies[0].get<std::string>());
  }
  if (!mismatches.empty() || !changed.empty()) {
    if (g.trusted()) {
      return TrustedFailed(g, plan,
                           "disagrees with the reference run in the harness (a nondeterministic "
                           "kernel, or tolerances too tight): " +
                               mismatches.dump().substr(0, 400) + changed.dump());
    }
    s.checks.push_back({{"size", plan.size.label},
                        {"kind", "timed"},
                        {"trial", 0},
                        {"passed", false},
                        {"mismatches", mismatches},
                        {"inputs_changed", changed}});
    return Error(ErrorKind::kMismatch,
                 "outputs of timed calls at size " + plan.size.label +
                     " differ from the baseline's (every timed call is verified)");
  }
  TraceBlock(s, g, plan, wall, claimed, clocks, split);
  const size_t calls_before = out->claimed_us.size();
  for (auto [from, to] : {std::pair{&wall, &out->wall_us}, std::pair{&claimed, &out->claimed_us}}) {
    std::vector<double> block = MaxOverRanks(*from);
    to->insert(to->end(), block.begin(), block.end());
  }
  if (out->claimed_us.size() > calls_before)
    out->blocks.push_back(static_cast<int>(out->claimed_us.size() - calls_before));
  for (auto [block, to] : {std::pair{CallGaps(wall, claimed, s.emulated), &out->gap_us},
                           std::pair{WallSpread(wall), &out->spread_us}}) {
    to->insert(to->end(), block.begin(), block.end());
  }
  return Status::Ok();
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int DriveWarmup(const SizePlan& plan) { return std::clamp(plan.baseline.warmup / 4, 5, 50); }

// The claims only size the blocks; FinishTiming checks them against the
// harness's wall times.
Status TimedCalls(EvalSession& s, ServedGroup& g, SizePlan& plan, Side* out) {
  const TimingRule rule = s.Rule();
  int warmup = DriveWarmup(plan);
  double spent_s = 0, call_wall_us = plan.baseline.call_wall_us;
  for (int block;
       (block = NextBlock(rule, out->claimed_us, out->blocks, spent_s, call_wall_us)) > 0;) {
    auto t0 = std::chrono::steady_clock::now();
    KF_RETURN_IF_ERROR(DriveBlock(s, g, plan, warmup, block, out));
    const double took = SecondsSince(t0);
    spent_s += took;
    call_wall_us = took * 1e6 / (warmup + block);
    warmup = 0;
  }
  return Status::Ok();
}

}  // namespace kforge::eval
