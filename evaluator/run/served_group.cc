// A served group of one evaluation (the reference group, the candidate group
// or the expert group): W sandboxed candidate-role workers with a mailbox
// each (started ahead where a warm group of its purpose waits:
// run/warm_groups.h), a private read-only copy of the kernel in their
// directory, the supervisor of their seccomp notifications, and the
// calibration of the timing path before the kernel is loaded. The reference
// and the candidate run in the same kind of process and are timed through the
// same mailbox path (docs/methodology.md).
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "kforge/core/fs.h"
#include "kforge/core/hash.h"
#include "kforge/core/log.h"
#include "protocol/messages.h"
#include "run/canary.h"
#include "run/stats.h"
#include "run/trace.h"
#include "run/warm_groups.h"
#include "session.h"

namespace kforge::eval {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr int kCalibrationCalls = 50;

// Copies the kernel into the group's directory (fresh, made when the group
// was spawned, known only to it and to this evaluation), read-only, and
// checks that the copy holds the bytes that were read.
Result<fs::path> PrivateCopy(const fs::path& so, const fs::path& dir) {
  KF_ASSIGN_OR_RETURN(std::string bytes, ReadFile(so));
  fs::path copy = dir / "kernel.so";
  KF_RETURN_IF_ERROR(WriteFileAtomic(copy, bytes));
  KF_ASSIGN_OR_RETURN(std::string back, ReadFile(copy));
  if (Sha256Hex(back) != Sha256Hex(bytes))
    return Error(ErrorKind::kIo, "the kernel's private copy differs");
  chmod(copy.c_str(), 0444);
  chmod(dir.c_str(), 0555);
  return copy;
}

}  // namespace

bool MayUseCollectives(const EvalSession& s, const ServedGroup& sg) {
  // The reference is trusted: it may use what its task forbids candidates.
  // The expert, trusted too, keeps to the candidates' policy.
  return sg.reference() || s.CandidateMayUseCollectives();
}

GroupOptions ServedShape(const EvalSession& s, const ServedGroup& sg) {
  GroupOptions g;
  g.worker_path = s.worker;
  g.role = "candidate";
  g.world = s.world;
  g.emulated = s.emulated;
  g.env = s.worker_env;
  g.mps_dir = s.mps_dir;
  g.profile_rank0 = !sg.trusted() && s.options->profile && s.options->timing;
  g.start_deadline_s = s.options->setup_deadline_s;
  g.capture_output = true;
  g.devices = s.harness->options().devices;
  // On real GPUs a group that may call the harness collectives gets its own
  // NCCL communicator (its id comes from the harness at attach).
  g.candidate_nccl = !s.emulated && MayUseCollectives(s, sg);
  return g;
}

Status StartServed(EvalSession& s, ServedGroup& sg, const fs::path& kernel_so) {
  sg.collectives = MayUseCollectives(s, sg);
  GroupOptions g = ServedShape(s, sg);
  std::string nccl_id;
  if (g.candidate_nccl) {
    auto ids = s.harness->All({{"op", proto::op::kNcclId}}, s.options->setup_deadline_s, "setup");
    if (!ids.ok()) return GroupFailed(s, *s.harness, ids.status());
    nccl_id = (*ids)[0].body.value("id", "");
  }
  // The mailboxes and the directory are made with the processes (the
  // sandbox grants the directory at spawn).
  const auto spawn_t0 = std::chrono::steady_clock::now();
  KF_ASSIGN_OR_RETURN(SpawnedGroup spawned,
                      s.warm_groups ? s.warm_groups->Acquire(sg.who, g) : SpawnGroup(g));
  TraceExchange(sg.who, spawned.warm ? "take warm group" : "spawn", "setup", spawn_t0);
  sg.group = std::move(spawned.group);
  sg.mailboxes = std::move(spawned.mailboxes);
  sg.dir = spawned.dir;
  sg.warm = spawned.warm;
  sg.shape = g;
  // Before its kernel is loaded: every byte the candidate's code writes to
  // stdout or stderr is searched for the canary, not only what is kept.
  if (!sg.trusted() && !s.canary_needles.empty()) sg.group->WatchOutput(s.canary_needles);
  KF_ASSIGN_OR_RETURN(fs::path copy, PrivateCopy(kernel_so, sg.dir));
  WorkerGroup& c = *sg.group;
  const double dl = s.options->setup_deadline_s;

  // The sandbox is complete once the arenas are mapped (seccomp comes last).
  // Its report is believed: no candidate code has run in the process yet.
  proto::AttachRequest attach{s.candidate_arenas, nccl_id};
  const auto attach_t0 = std::chrono::steady_clock::now();
  auto attached =
      c.Each(std::vector<json>(s.world, attach.ToJson()),
             std::vector<std::vector<int>>(s.world, s.candidate_arena_fds), dl, "sandbox");
  if (!attached.ok()) return GroupFailed(s, c, attached.status());
  TraceExchange(sg.who, "attach", "sandbox", attach_t0);
  sg.supervisor = std::make_unique<sandbox::Supervisor>();
  for (int r = 0; r < s.world; ++r) {
    Message& m = (*attached)[r];
    sandbox::Report report = sandbox::Report::FromJson(m.body.value("sandbox", json::object()));
    if (!sg.trusted() &&
        (r == 0 || (!report.Complete() && s.sandbox_report.value("complete", true)))) {
      s.sandbox_report = report.ToJson();
      s.sandbox_report["summary"] = report.Summary();
    }
    if (!m.fds.empty()) {
      sg.supervisor->Watch(r, c.pids()[r], m.fds[0]);
      m.fds.erase(m.fds.begin());
    }
    for (int fd : m.fds) close(fd);
  }

  // Calibration: the same mailbox path with an empty kernel, on our clock.
  const SizePlan& first = s.plans.front();
  KF_RETURN_IF_ERROR(
      Exchange(s, c, ConfigureMessage(s, first, sg.collectives), dl, "setup").status());
  const auto calibrate_t0 = std::chrono::steady_clock::now();
  proto::CalibrateRequest cal{sg.next_seq, kCalibrationCalls, 10};
  sg.next_seq += kCalibrationCalls;
  std::vector<json> msgs(s.world, cal.ToJson());
  if (Status st = c.Post(msgs, {}, "calibration"); !st.ok()) return GroupFailed(s, c, st);
  std::vector<std::vector<int>> fds;
  for (auto& m : sg.mailboxes) fds.push_back({m.fd()});
  // Watched like a drive: a served process that exits ends the wait at once.
  auto timed = s.harness->Each(msgs, fds, dl, "calibration", &c);
  if (!timed.ok()) {
    // No kernel is loaded yet: whatever went wrong, a served process's
    // death included, is kforge's.
    const DriveFailure f = JudgeFailedDrive(c, timed.status(), "calibration");
    Status st = GroupFailed(s, f.served_failed ? c : *s.harness, f.status);
    return Error(ErrorKind::kHarness, "calibrating the mailbox: " + st.message());
  }
  auto served = c.Collect(dl, "calibration");
  TraceExchange(sg.who, "calibrate", "setup", calibrate_t0);
  if (!served.ok()) return GroupFailed(s, c, served.status());
  std::vector<std::vector<double>> wall, claimed;
  for (int r = 0; r < s.world; ++r) {
    KF_ASSIGN_OR_RETURN(proto::CallTimes t, proto::CallTimes::Parse((*timed)[r].body, "calibration",
                                                                    kCalibrationCalls));
    wall.push_back(std::move(t.wall_us));
    claimed.push_back(std::move(t.event_us));
  }
  sg.overhead_us = std::max(0.0, Quantile(CallGaps(wall, claimed, s.emulated), 0.5));

  KF_RETURN_IF_ERROR(
      Exchange(s, c, proto::PathRequest{copy.string()}.ToJson(proto::op::kLoad), dl, "load")
          .status());
  return Status::Ok();
}

void StopServed(EvalSession& s, ServedGroup& sg) {
  if (sg.group) {
    sg.group->Kill();
    if (!sg.trusted()) {
      s.candidate_output = sg.group->CapturedOutput();
      if (auto seen = sg.group->OutputSighting()) {
        const CanaryFound found = CanaryInStream(seen->first, seen->second);
        s.integrity.push_back(CanaryFinding(found));
        if (s.canary_found.empty()) s.canary_found = found.where;
      }
    }
    sg.group.reset();
  }
  if (sg.supervisor) {
    const auto violations = sg.supervisor->Violations();
    for (size_t i = 0; i < violations.size(); ++i) {
      const sandbox::Violation& v = violations[i];
      if (i >= sg.profiled_violations.first && i < sg.profiled_violations.second) continue;
      if (sg.trusted()) {
        LogWarn("evaluator", "the task's {} tripped its sandbox: {}",
                sg.reference() ? "reference" : "expert kernel", v.ToString());
      } else {
        s.integrity.push_back({{"check", "sandbox"}, {"rank", v.rank}, {"message", v.ToString()}});
      }
    }
    sg.supervisor.reset();
  }
  sg.mailboxes.clear();
  sg.next_seq = 1;
  sg.profiled_violations = {0, 0};
  if (!sg.dir.empty()) {
    std::error_code ec;
    fs::permissions(sg.dir, fs::perms::owner_all, ec);
    fs::remove_all(sg.dir, ec);
    sg.dir.clear();
  }
}

}  // namespace kforge::eval
