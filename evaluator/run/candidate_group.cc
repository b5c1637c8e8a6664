// The candidate group of one evaluation: a private read-only copy of the
// kernel, W sandboxed candidate workers with a mailbox each, the supervisor of
// their seccomp notifications, and the calibration of the timing path before
// any candidate code is loaded.
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "kforge/core/fs.h"
#include "kforge/core/hash.h"
#include "kforge/core/log.h"
#include "protocol/messages.h"
#include "run/stats.h"
#include "session.h"

namespace kforge::eval {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr int kCalibrationCalls = 50;

// Copies the kernel into a fresh directory only this evaluation knows,
// read-only, and checks that the copy holds the bytes that were read.
Result<fs::path> PrivateCopy(const fs::path& so, fs::path* dir) {
  std::string tmpl = (fs::temp_directory_path() / "kforge-candidate-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return Error(ErrorKind::kIo, "mkdtemp failed for " + tmpl);
  *dir = tmpl;
  KF_ASSIGN_OR_RETURN(std::string bytes, ReadFile(so));
  fs::path copy = *dir / "kernel.so";
  KF_RETURN_IF_ERROR(WriteFileAtomic(copy, bytes));
  KF_ASSIGN_OR_RETURN(std::string back, ReadFile(copy));
  if (Sha256Hex(back) != Sha256Hex(bytes))
    return Error(ErrorKind::kIo, "the kernel's private copy differs");
  chmod(copy.c_str(), 0444);
  chmod(dir->c_str(), 0555);
  return copy;
}

}  // namespace

Status StartCandidate(EvalSession& s, const fs::path& kernel_so) {
  KF_ASSIGN_OR_RETURN(fs::path copy, PrivateCopy(kernel_so, &s.candidate_dir));
  GroupOptions g;
  g.worker_path = s.worker;
  g.role = "candidate";
  g.world = s.world;
  g.emulated = s.emulated;
  g.env = s.worker_env;
  g.mps_dir = s.mps_dir;
  g.candidate_dir = s.candidate_dir.string();
  g.start_deadline_s = s.options->setup_deadline_s;
  for (int r = 0; r < s.world; ++r) {
    KF_ASSIGN_OR_RETURN(proto::Mailbox m, proto::Mailbox::Create());
    g.mailbox_fds.push_back(m.fd());
    s.mailboxes.push_back(std::move(m));
  }
  g.devices = s.harness->options().devices;
  // On real GPUs a candidate that may call the harness collectives gets its
  // own NCCL communicator (a fresh id from the harness).
  std::string nccl_id;
  if (!s.emulated && s.CandidateMayUseCollectives()) {
    auto ids = s.harness->All({{"op", proto::op::kNcclId}}, s.options->setup_deadline_s, "setup");
    if (!ids.ok()) return GroupFailed(s, *s.harness, ids.status());
    nccl_id = (*ids)[0].body.value("id", "");
    g.candidate_nccl = true;
  }
  KF_ASSIGN_OR_RETURN(s.candidate, WorkerGroup::Start(g));
  WorkerGroup& c = *s.candidate;
  const double dl = s.options->setup_deadline_s;

  // The sandbox is complete once the arenas are mapped (seccomp comes last).
  // Its report is believed: no candidate code has run in the process yet.
  proto::AttachRequest attach{s.candidate_handles, nccl_id};
  KF_ASSIGN_OR_RETURN(auto attached, Exchange(s, c, attach.ToJson(), dl, "sandbox"));
  s.supervisor = std::make_unique<sandbox::Supervisor>();
  for (int r = 0; r < s.world; ++r) {
    Message& m = attached[r];
    sandbox::Report report = sandbox::Report::FromJson(m.body.value("sandbox", json::object()));
    if (r == 0 || (!report.Complete() && s.sandbox_report.value("complete", true))) {
      s.sandbox_report = report.ToJson();
      s.sandbox_report["summary"] = report.Summary();
    }
    if (!m.fds.empty()) {
      s.supervisor->Watch(r, c.pids()[r], m.fds[0]);
      m.fds.erase(m.fds.begin());
    }
    for (int fd : m.fds) close(fd);
  }

  // Calibration: the same mailbox path with an empty kernel, on our clock.
  const SizePlan& first = s.plans.front();
  KF_RETURN_IF_ERROR(
      Exchange(s, c, ConfigureMessage(s, first, s.CandidateMayUseCollectives()), dl, "setup")
          .status());
  proto::CalibrateRequest cal{s.next_seq, kCalibrationCalls, 10};
  s.next_seq += kCalibrationCalls;
  std::vector<json> msgs(s.world, cal.ToJson());
  if (Status st = c.Post(msgs, {}, "calibration"); !st.ok()) return GroupFailed(s, c, st);
  std::vector<std::vector<int>> fds;
  for (auto& m : s.mailboxes) fds.push_back({m.fd()});
  auto timed = s.harness->Each(msgs, fds, dl, "calibration");
  if (!timed.ok()) {
    s.candidate->Kill();
    return GroupFailed(s, *s.harness, timed.status());
  }
  auto served = c.Collect(dl, "calibration");
  if (!served.ok()) return GroupFailed(s, c, served.status());
  std::vector<std::vector<double>> wall, claimed;
  for (int r = 0; r < s.world; ++r) {
    KF_ASSIGN_OR_RETURN(proto::CallTimes t, proto::CallTimes::Parse((*timed)[r].body, "calibration",
                                                                    kCalibrationCalls));
    wall.push_back(std::move(t.wall_us));
    claimed.push_back(std::move(t.event_us));
  }
  std::vector<double> w = MaxOverRanks(wall), e = MaxOverRanks(claimed), gap;
  for (size_t k = 0; k < w.size(); ++k) gap.push_back(w[k] - e[k]);
  s.overhead_us = std::max(0.0, Quantile(gap, 0.5));

  KF_RETURN_IF_ERROR(
      Exchange(s, c, proto::PathRequest{copy.string()}.ToJson(proto::op::kLoad), dl, "load")
          .status());
  return Status::Ok();
}

void StopCandidate(EvalSession& s) {
  if (s.candidate) {
    s.candidate->Kill();
    s.candidate.reset();
  }
  if (s.supervisor) {
    for (const sandbox::Violation& v : s.supervisor->Violations()) {
      s.integrity.push_back({{"check", "sandbox"}, {"rank", v.rank}, {"message", v.ToString()}});
    }
    s.supervisor.reset();
  }
  s.mailboxes.clear();
  if (!s.candidate_dir.empty()) {
    std::error_code ec;
    fs::permissions(s.candidate_dir, fs::perms::owner_all, ec);
    fs::remove_all(s.candidate_dir, ec);
    s.candidate_dir.clear();
  }
}

}  // namespace kforge::eval
