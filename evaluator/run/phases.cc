// The candidate's phases at one size: correctness against the oracle (check
// sizes) or the baseline (bench sizes), then timed calls driven and verified
// by the harness (docs/methodology.md).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <random>

#include "kforge/core/log.h"
#include "protocol/messages.h"
#include "run/baseline_cache.h"
#include "run/canary.h"
#include "run/drive.h"
#include "run/dump.h"
#include "run/stats.h"
#include "run/trace.h"
#include "session.h"

namespace kforge::eval {
namespace {

using nlohmann::json;

json SetsMessage(const char* op, std::vector<int> sets, uint32_t poison = 0xFFFFFFFFu) {
  proto::SetsRequest r;
  r.sets = std::move(sets);
  r.poison = poison;
  return r.ToJson(op);
}

std::string ChangedMessage(const json& changed) {
  std::string m = "the kernel modified its inputs:";
  for (const auto& c : changed) {
    m += " " + c["input"].get<std::string>() + " on rank " + std::to_string(c["rank"].get<int>()) +
         ";";
  }
  return m;
}

// Reads one rank's outputs from the memfd its harness rank sent.
Result<std::vector<std::vector<char>>> OutputsFrom(const Message& m,
                                                   const proto::ReadOutputsReply& r) {
  if (m.fds.size() != 1) return Error(ErrorKind::kHarness, "the harness sent no outputs");
  size_t total = 1;
  for (size_t o = 0; o < r.offsets.size(); ++o) total = std::max(total, r.offsets[o] + r.nbytes[o]);
  void* p = mmap(nullptr, total, PROT_READ, MAP_SHARED, m.fds[0], 0);
  if (p == MAP_FAILED) return Error(ErrorKind::kHarness, "mmap of the outputs failed");
  std::vector<std::vector<char>> out;
  for (size_t o = 0; o < r.offsets.size(); ++o) {
    const char* b = static_cast<const char*>(p) + r.offsets[o];
    out.emplace_back(b, b + r.nbytes[o]);
  }
  munmap(p, total);
  return out;
}

// Whether the harness's baseline runs at this size: at bench sizes it
// computes the expected outputs; at a check size, its error against the
// oracle (baseline_error.cc).
bool HarnessBaselineRuns(const SizePlan& plan) {
  return !plan.check || MeasuresBaselineError(plan);
}

// The harness and the served group see the size's problem, and both
// kf_setups run (the harness's where its baseline runs).
Status Prepare(EvalSession& s, SizePlan& plan, ServedGroup& g) {
  const double dl = s.options->setup_deadline_s;
  KF_RETURN_IF_ERROR(
      Exchange(s, *s.harness, HarnessConfigureMessage(s, plan), dl, "setup").status());
  if (HarnessBaselineRuns(plan)) {
    KF_RETURN_IF_ERROR(
        Exchange(s, *s.harness, json{{"op", proto::op::kSetup}}, dl, "setup").status());
  }
  KF_RETURN_IF_ERROR(
      Exchange(s, *g.group, ConfigureMessage(s, plan, g.collectives), dl, "setup").status());
  // The served group's kf_setup: the candidate's counts against its budget.
  CandidateTime clock(s, !g.trusted());
  KF_RETURN_IF_ERROR(
      Exchange(s, *g.group, json{{"op", proto::op::kSetup}}, clock.Deadline(dl), "setup").status());
  return Status::Ok();
}

Status Release(EvalSession& s, const SizePlan& plan, ServedGroup& g) {
  const double dl = s.options->setup_deadline_s;
  KF_RETURN_IF_ERROR(
      Exchange(s, *g.group, json{{"op", proto::op::kTeardown}}, dl, "teardown").status());
  if (HarnessBaselineRuns(plan)) {
    KF_RETURN_IF_ERROR(
        Exchange(s, *s.harness, json{{"op", proto::op::kTeardown}}, dl, "teardown").status());
  }
  return Status::Ok();
}

// One correctness call of the candidate on set 0 (inputs already there):
// outputs poisoned by the harness, the call, every rank done.
Status CandidateCall(EvalSession& s, uint32_t poison) {
  const double dl = s.options->check_deadline_s;
  KF_RETURN_IF_ERROR(
      Exchange(s, *s.harness, SetsMessage(proto::op::kPoison, {0}, poison), dl, "correctness")
          .status());
  CandidateTime clock(s, true);
  KF_RETURN_IF_ERROR(Exchange(s, *s.candidate.group, proto::RunRequest{0}.ToJson(),
                              clock.Deadline(dl), "correctness")
                         .status());
  return Status::Ok();
}

// The raw outputs of every rank of set 0 from the harness: the candidate's,
// or the baseline's. `changed`, if given, gets the inputs the candidate modified.
Result<std::vector<std::vector<std::vector<char>>>> ReadAll(EvalSession& s, bool baseline,
                                                            json* changed) {
  proto::ReadOutputsRequest req;
  req.baseline = baseline;
  KF_ASSIGN_OR_RETURN(
      auto read, Exchange(s, *s.harness, req.ToJson(), s.options->check_deadline_s, "correctness"));
  std::vector<std::vector<std::vector<char>>> outputs;
  Status failed = Status::Ok();
  for (int r = 0; r < s.world; ++r) {
    auto reply = proto::ReadOutputsReply::Parse(read[r].body, "outputs");
    if (reply.ok() && failed.ok()) {
      for (const auto& name : reply->inputs_changed) {
        if (changed != nullptr) changed->push_back(json{{"rank", r}, {"input", name}});
      }
      auto o = OutputsFrom(read[r], *reply);
      if (o.ok())
        outputs.push_back(std::move(o).value());
      else
        failed = o.status();
    } else if (failed.ok()) {
      failed = reply.status();
    }
    for (int fd : read[r].fds) close(fd);
  }
  if (!failed.ok()) return failed;
  return outputs;
}

// The host's share of a correctness trial: every rank's inputs, the oracle's
// view of them and the oracle's run. It depends on the trial's seed alone.
Status HostTrial(const Problem& p, uint64_t seed, int world, const std::string& label,
                 HostInputs* inputs, OracleIo* io) {
  const auto t0 = std::chrono::steady_clock::now();
  KF_RETURN_IF_ERROR(GenerateAllInputsInto(p, seed, inputs));
  std::vector<std::vector<const void*>> ptrs(world);
  for (int r = 0; r < world; ++r) {
    for (const auto& b : (*inputs)[r]) ptrs[r].push_back(b.data());
  }
  KF_RETURN_IF_ERROR(BuildOracleIoInto(p, ptrs, io));
  if (Status st = RunOracle(p, *io); !st.ok())
    return Error(ErrorKind::kHarness, "the task's oracle failed: " + st.message());
  TraceExchange("coordinator", "inputs and oracle", label, t0);
  return Status::Ok();
}

}  // namespace

Status RunCheckSize(EvalSession& s, SizePlan& plan) {
  const Problem& p = plan.problem;
  KF_RETURN_IF_ERROR(Prepare(s, plan, s.candidate));
  const double dl = s.options->check_deadline_s;
  // The host's buffers for the oracle, reused by every trial of the size.
  HostInputs inputs;
  OracleIo io;
  for (int trial = 0; trial < s.options->trials; ++trial) {
    uint64_t seed = s.NewSeed();
    // The host's share of the trial runs on a thread of its own beside the
    // harness's and the candidate's calls below, and is waited for before
    // the outputs are checked.
    auto host = std::async(std::launch::async, HostTrial, std::cref(p), seed, s.world,
                           std::cref(plan.size.label), &inputs, &io);
    proto::InputsRequest in;
    in.seeds.push_back({0, seed});
    KF_RETURN_IF_ERROR(Exchange(s, *s.harness, in.ToJson(), dl, "correctness").status());
    // The baseline on the same inputs, in the private arena, before any
    // candidate code runs on them: its error against the oracle.
    std::vector<std::vector<std::vector<char>>> baseline;
    if (HarnessBaselineRuns(plan)) {
      KF_RETURN_IF_ERROR(
          Exchange(s, *s.harness, SetsMessage(proto::op::kBaselineRun, {0}), dl, "baseline")
              .status());
      KF_ASSIGN_OR_RETURN(baseline, ReadAll(s, true, nullptr));
    }
    const uint32_t poison = s.NewPoison();
    KF_RETURN_IF_ERROR(CandidateCall(s, poison));

    json check = {{"size", plan.size.label}, {"kind", "check"}, {"trial", trial}};
    json changed = json::array();
    KF_ASSIGN_OR_RETURN(auto outputs, ReadAll(s, false, &changed));
    // The canary in an output rejects the kernel whatever else it computed.
    if (CanaryFound found = CanaryInOutputs(s.canary_needles, p, outputs, trial); found.found()) {
      s.integrity.push_back(CanaryFinding(found));
      s.canary_found = found.where;
      (void)Release(s, plan, s.candidate);
      return Error(ErrorKind::kIntegrityViolation, "the evaluation's canary in " + found.where);
    }
    KF_RETURN_IF_ERROR(host.get());
    if (trial == 0 && !s.options->dump_dir.empty()) {
      TrialTensors dump{&p, s.task->key, plan.size.label, s.dtype, seed, &inputs, &outputs, &io};
      if (Status st = DumpTrial(s.options->dump_dir, dump); !st.ok())
        return Error(ErrorKind::kIo, "--dump: " + st.message());
    }
    if (!baseline.empty())
      check["baseline_rms_vs_oracle"] = RecordBaselineError(s, plan, baseline, io);
    json mismatches = json::array();
    for (int r = 0; r < s.world; ++r) {
      for (size_t o = 0; o < p.outputs.size(); ++o) {
        if (p.outputs[o].only_rank >= 0 && p.outputs[o].only_rank != r) continue;
        json mm =
            CheckAgainstOracle(p, r, static_cast<int>(o), outputs[r][o].data(), io, inputs, poison);
        if (!mm.is_null()) mismatches.push_back(std::move(mm));
      }
    }
    check["passed"] = mismatches.empty() && changed.empty();
    check["mismatches"] = mismatches;
    if (!changed.empty()) check["inputs_changed"] = changed;
    s.checks.push_back(check);
    if (!check["passed"].get<bool>()) {
      (void)Release(s, plan, s.candidate);
      return Error(ErrorKind::kMismatch,
                   changed.empty() ? "outputs differ from the oracle at size " + plan.size.label
                                   : ChangedMessage(changed));
    }
    ++s.trials_passed;
  }
  return Release(s, plan, s.candidate);
}

namespace {

// Correctness at a bench size: one call against the baseline's outputs.
Status BenchCorrectness(EvalSession& s, SizePlan& plan) {
  const double dl = s.options->check_deadline_s;
  KF_RETURN_IF_ERROR(Exchange(s, *s.harness, InputsMessage(s, {0}), dl, "correctness").status());
  KF_RETURN_IF_ERROR(
      Exchange(s, *s.harness, SetsMessage(proto::op::kBaselineRun, {0}), dl, "baseline").status());
  KF_RETURN_IF_ERROR(CandidateCall(s, s.NewPoison()));
  KF_ASSIGN_OR_RETURN(
      auto ver, Exchange(s, *s.harness, SetsMessage(proto::op::kVerify, {0}), dl, "correctness"));
  json mismatches = json::array(), changed = json::array();
  for (int r = 0; r < s.world; ++r) {
    KF_ASSIGN_OR_RETURN(auto v, proto::VerifyReply::Parse(ver[r].body, "verify"));
    AddFailures(v.failures, &mismatches, false);
    for (const auto& [set, name] : v.inputs_changed)
      changed.push_back(json{{"rank", r}, {"input", name}});
  }
  json check = {{"size", plan.size.label},
                {"kind", "bench"},
                {"trial", 0},
                {"passed", mismatches.empty() && changed.empty()},
                {"mismatches", mismatches},
                {"vs_baseline", VsBaselineReport(s, plan.problem)}};
  if (!changed.empty()) check["inputs_changed"] = changed;
  s.checks.push_back(check);
  if (!check["passed"].get<bool>()) {
    return Error(ErrorKind::kMismatch,
                 changed.empty() ? "outputs differ from the baseline's at size " + plan.size.label
                                 : ChangedMessage(changed));
  }
  return Status::Ok();
}

// After the verdict's calls at the last bench size: kProfilePasses more,
// verified like every driven call, each one pass of rank 0's range profiler.
// What comes back is the candidate process's own report, so it is kept as
// advice beside the timing (never in it), and whatever goes wrong here is
// only the profile's failure: the verdict and its findings stay as they were.
// Unless it took the harness group with it (a served process that died or
// stalled in a profiled call ends the drive): the baseline can then not be
// timed after the candidate, and that failure is returned, so that it is
// judged like any failed drive (the candidate's, never a harness error).
Status ProfileCalls(EvalSession& s, SizePlan& plan) {
  const size_t checks = s.checks.size(), integrity = s.integrity.size();
  const json failure = s.failure;
  sandbox::Supervisor* sup = s.candidate.supervisor.get();
  const size_t refused_before = sup ? sup->Violations().size() : 0;
  json reply;
  Side scratch;
  Status st = DriveBlock(s, s.candidate, plan, 0, proto::kProfilePasses, &scratch, &reply);
  s.profile = {{"size", plan.size.label}, {"rank", 0}};
  if (sup != nullptr) {
    // A refused call blocks until answered, so each one of these calls is in.
    const auto refused = sup->Violations();
    s.candidate.profiled_violations = {refused_before, refused.size()};
    json listed = json::array();
    for (size_t i = refused_before; i < refused.size(); ++i)
      listed.push_back(refused[i].ToString());
    if (!listed.empty()) s.profile["refused_syscalls"] = listed;
  }
  if (!st.ok() && !s.harness->alive()) return st;
  if (!st.ok()) {
    s.checks.erase(s.checks.begin() + static_cast<std::ptrdiff_t>(checks), s.checks.end());
    s.integrity.erase(s.integrity.begin() + static_cast<std::ptrdiff_t>(integrity),
                      s.integrity.end());
    s.failure = failure;
    s.profile["skipped"] = "the profiled calls failed: " + st.message();
    return Status::Ok();
  }
  auto r = proto::ServeReply::Parse(reply, "reply to the profiled serve from rank 0");
  if (!r.ok()) {
    s.profile["skipped"] = r.status().message();
  } else if (r->profile.empty()) {
    s.profile["skipped"] = r->profile_error.empty() ? "no metric came back" : r->profile_error;
  } else {
    json m = json::object();
    for (const auto& [name, value] : r->profile) m[name] = value;
    s.profile["metrics"] = m;
    s.profile["calls"] = proto::kProfilePasses;
  }
  return Status::Ok();
}

}  // namespace

Status RunBenchSize(EvalSession& s, SizePlan& plan) {
  KF_RETURN_IF_ERROR(Prepare(s, plan, s.candidate));
  Status st = BenchCorrectness(s, plan);
  if (st.ok() && s.options->timing) st = TimedCalls(s, s.candidate, plan, &plan.candidate);
  if (st.ok() && s.options->timing && s.options->profile && &plan == &s.plans.back()) {
    KF_RETURN_IF_ERROR(ProfileCalls(s, plan));
    if (!s.candidate.alive()) return Status::Ok();  // the profile's failure took the group
  }
  if (!st.ok()) {
    if (s.candidate.alive()) (void)Release(s, plan, s.candidate);
    return st;
  }
  return Release(s, plan, s.candidate);
}

namespace {

// Whether a short block of the reference, timed now, confirms the reused
// record (RecordAgrees, with the session's ConfirmSlack).
bool Confirms(EvalSession& s, SizePlan& plan, const Side& now) {
  const TimingStats st = Summarize(now.claimed_us, now.wall_us, now.blocks);
  const BaselineTiming& b = plan.baseline;
  const TimingStats record = Summarize(b.side.claimed_us, b.side.wall_us, b.side.blocks);
  plan.confirm_median_us = st.median_us;
  if (RecordAgrees(record, st, s.ConfirmSlack())) return true;
  LogInfo("evaluator",
          "size {}: the reused baseline's [{:.2f}, {:.2f}] us misses a fresh block's [{:.2f}, "
          "{:.2f}] us; timing the baseline again",
          plan.size.label, record.ci_lo_us, record.ci_hi_us, st.ci_lo_us, st.ci_hi_us);
  return false;
}

}  // namespace

// The reference group is driven exactly like the candidate (the same rounds,
// verification and mailbox path), so that the baseline's times and the
// candidate's are measured the same way. Before the candidate, a short probe
// sizes the warm-up and the blocks of both sides. A reused baseline is not
// timed before; after, a block of a side's fewest calls (TimingRule::
// min_calls) must confirm it, or it is timed in full there and then.
Status TimeBaselines(EvalSession& s, bool after) {
  if (!s.options->timing) return Status::Ok();
  const int confirm_calls = s.Rule().min_calls;
  for (SizePlan& plan : s.plans) {
    if (plan.check || (plan.BaselineReused() && !after)) continue;
    KF_RETURN_IF_ERROR(Prepare(s, plan, s.reference));
    if (plan.BaselineReused()) {
      Side now;
      KF_RETURN_IF_ERROR(DriveBlock(s, s.reference, plan, DriveWarmup(plan), confirm_calls, &now));
      if (Confirms(s, plan, now)) {
        KF_RETURN_IF_ERROR(Release(s, plan, s.reference));
        continue;
      }
      plan.DropReusedBaseline();
    }
    if (!after || plan.baseline.call_wall_us == 0) {
      Side probe;
      auto p0 = std::chrono::steady_clock::now();
      KF_RETURN_IF_ERROR(DriveBlock(s, s.reference, plan, 2, 3, &probe));
      plan.baseline.call_wall_us = SecondsSince(p0) * 1e6 / 5;
      plan.baseline.warmup = WarmupCalls(s.Rule(), plan.baseline.call_wall_us);
    }
    Side side;
    KF_RETURN_IF_ERROR(TimedCalls(s, s.reference, plan, &side));
    (after ? plan.baseline.after_us : plan.baseline.before_us) = Quantile(side.claimed_us, 0.5);
    plan.baseline.side.Append(side);
    KF_RETURN_IF_ERROR(Release(s, plan, s.reference));
  }
  return Status::Ok();
}

Status TimeExpertSides(EvalSession& s) {
  for (SizePlan& plan : s.plans) {
    if (plan.check || plan.baseline.side.claimed_us.empty() || !plan.expert.side.claimed_us.empty())
      continue;
    KF_RETURN_IF_ERROR(Prepare(s, plan, s.expert));
    Side side;
    KF_RETURN_IF_ERROR(TimedCalls(s, s.expert, plan, &side));
    plan.expert.side = std::move(side);
    KF_RETURN_IF_ERROR(Release(s, plan, s.expert));
  }
  return Status::Ok();
}

}  // namespace kforge::eval
