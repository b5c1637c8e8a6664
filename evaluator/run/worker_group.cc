#include "run/worker_group.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "kforge/core/log.h"
#include "kforge/evaluator/canary.h"
#include "protocol/messages.h"
#include "run/worker_spawn.h"
#include "sandbox/sandbox.h"

namespace kforge::eval {
namespace {

using std::chrono::milliseconds;

// How a rank whose channel closed ended. The process may still be exiting,
// so wait a little for its status.
std::string DescribeExit(pid_t pid) {
  int status = 0;
  pid_t r = 0;
  for (int i = 0; i < 200 && r == 0; ++i) {
    r = waitpid(pid, &status, WNOHANG);
    if (r == 0) std::this_thread::sleep_for(milliseconds(5));
  }
  if (r == pid) {
    if (WIFSIGNALED(status))
      return "crashed (signal " + std::to_string(WTERMSIG(status)) + ", " +
             strsignal(WTERMSIG(status)) + ")";
    if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  }
  return "closed its channel";
}

}  // namespace

Result<std::unique_ptr<WorkerGroup>> WorkerGroup::Start(const GroupOptions& options) {
  constexpr int kRetries = 4;
  for (int attempt = 0;; ++attempt) {
    auto g = StartOnce(options);
    if (g.ok() || attempt == kRetries ||
        g.status().message().find("cudaErrorMpsServerNotReady") == std::string::npos) {
      return g;
    }
    const milliseconds wait(200 << attempt);
    LogInfo("evaluator",
            "the MPS server is not ready for a {} group yet; starting it again in {} ms",
            options.role, wait.count());
    std::this_thread::sleep_for(wait);
  }
}

Result<std::unique_ptr<WorkerGroup>> WorkerGroup::StartOnce(const GroupOptions& options) {
  auto g = std::unique_ptr<WorkerGroup>(new WorkerGroup());
  g->options_ = options;
  if (static_cast<int>(options.devices.size()) != options.world) {
    return Error(ErrorKind::kInvalidInput, "one device per rank is required");
  }
  if (options.role == "candidate" &&
      static_cast<int>(options.mailbox_fds.size()) != options.world) {
    return Error(ErrorKind::kInvalidInput, "a candidate group needs one mailbox per rank");
  }
  if (!options.canary.empty() && options.role != "harness") {
    return Error(ErrorKind::kInvalidInput, "only a harness group may hold the canary");
  }
  if (access(options.worker_path.c_str(), X_OK) != 0) {
    return Error(ErrorKind::kNotFound,
                 "kforge-worker not found at " + options.worker_path.string());
  }
  KF_ASSIGN_OR_RETURN(g->control_, ControlBlock::Create(options.world));
  if (!options.canary.empty()) {
    KF_ASSIGN_OR_RETURN(g->canary_file_, CanaryFile::Plant(options.canary));
  }
  // 64 KiB of the head and of the tail of each rank's output: its first
  // error and its last words.
  if (options.capture_output) g->output_ = std::make_unique<OutputDrain>(64 << 10, 64 << 10);
  for (int r = 0; r < options.world; ++r) {
    KF_ASSIGN_OR_RETURN(auto pair, MakeSocketPair());
    int mailbox = options.role == "candidate" ? options.mailbox_fds[r] : -1;
    int output = -1;
    if (g->output_) {
      Result<int> w = g->output_->AddRank();
      if (!w.ok()) {
        close(pair.first);
        close(pair.second);
        g->Kill();
        return w.status();
      }
      output = *w;
    }
    auto pid = SpawnWorker(options, r, pair.second, g->control_.fd(), mailbox, output);
    if (output >= 0) close(output);
    close(pair.second);
    if (!pid.ok()) {
      close(pair.first);
      g->Kill();
      return pid.status();
    }
    g->pids_.push_back(*pid);
    g->channels_.emplace_back(pair.first);
  }
  g->alive_ = true;
  g->early_.resize(static_cast<size_t>(options.world));
  if (g->output_) g->output_->Start();
  // Hellos (each rank created its CUDA context), then NCCL when it is used.
  g->hellos_.resize(options.world);
  auto deadline = std::chrono::steady_clock::now() +
                  milliseconds(static_cast<int64_t>(options.start_deadline_s * 1000));
  for (int r = 0; r < options.world; ++r) {
    auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    auto m = g->channels_[r].Receive(std::max(left, milliseconds(1)));
    std::string why;
    if (!m.ok()) {
      why = m.status().kind() == ErrorKind::kIo
                ? "rank " + std::to_string(r) + " " + DescribeExit(g->pids_[r])
                : m.status().message();
    } else if (Status st =
                   m->body.contains("op") ? Status::Ok() : proto::ReplyStatus(m->body, "hello");
               !st.ok()) {
      why = st.message();
    } else if (auto h = proto::Hello::Parse(m->body, "hello from rank " + std::to_string(r));
               !h.ok()) {
      why = h.status().message();
    } else if (h->role != options.role || h->rank != r) {
      why = "the hello names another role or rank";
    }
    if (!why.empty()) {
      g->Kill();
      return Error(ErrorKind::kHarness, "starting " + options.role + " rank " + std::to_string(r) +
                                            " on device " + std::to_string(options.devices[r]) +
                                            " failed: " + why);
    }
    g->hellos_[r] = m->body;
  }
  if (!options.emulated && options.role == "harness") {
    std::string id = g->hellos_[0].value("nccl_id", "");
    auto r =
        g->All({{"op", proto::op::kNcclInit}, {"id", id}}, options.start_deadline_s, "nccl_init");
    if (!r.ok()) return r.status().WithContext("initialising NCCL");
  }
  return g;
}

WorkerGroup::~WorkerGroup() {
  if (alive_) {
    for (auto& c : channels_) (void)c.Send({{"op", "exit"}});
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (pid_t pid : pids_) {
      while (waitpid(pid, nullptr, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          kill(-pid, SIGKILL);
          kill(pid, SIGKILL);
          waitpid(pid, nullptr, 0);
          break;
        }
        std::this_thread::sleep_for(milliseconds(5));
      }
    }
    alive_ = false;
  }
  if (output_) output_->Finish(milliseconds(500));
}

void WorkerGroup::Kill() {
  if (control_.shared()) control_.RaiseAbort();
  for (pid_t pid : pids_) {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
  }
  for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  pids_.clear();
  channels_.clear();
  early_.clear();
  alive_ = false;
  // The ranks are dead: what they wrote is in the pipes, whole.
  if (output_) output_->Finish(milliseconds(500));
}

nlohmann::json WorkerGroup::CapturedOutput() const {
  return output_ ? output_->ToJson() : nlohmann::json::array();
}

void WorkerGroup::WatchOutput(const std::vector<std::string>& needles) {
  if (output_) output_->Watch(needles);
}

std::optional<std::pair<int, CanarySighting>> WorkerGroup::OutputSighting() const {
  return output_ ? output_->Sighting() : std::nullopt;
}

Status WorkerGroup::Fail(GroupFailure f) {
  failure_ = std::move(f);
  Kill();
  std::string msg = failure_.message;
  if (!failure_.hung_ranks.empty()) {
    msg = "ranks";
    for (int r : failure_.hung_ranks) msg += " " + std::to_string(r);
    msg += " did not finish " + failure_.phase + " within " +
           std::to_string(static_cast<int>(failure_.deadline_s)) + " s";
  }
  return Error(failure_.kind, msg);
}

Result<std::vector<Message>> WorkerGroup::All(const nlohmann::json& msg, double deadline_s,
                                              const std::string& phase) {
  return Each(std::vector<nlohmann::json>(options_.world, msg), deadline_s, phase);
}

Result<std::vector<Message>> WorkerGroup::Each(const std::vector<nlohmann::json>& msgs,
                                               double deadline_s, const std::string& phase) {
  return Each(msgs, {}, deadline_s, phase);
}

Result<std::vector<Message>> WorkerGroup::Each(const std::vector<nlohmann::json>& msgs,
                                               const std::vector<std::vector<int>>& fds,
                                               double deadline_s, const std::string& phase) {
  KF_RETURN_IF_ERROR(Post(msgs, fds, phase));
  return Collect(deadline_s, phase);
}

void WorkerGroup::Abort() {
  if (control_.shared()) control_.RaiseAbort();
}

Status WorkerGroup::Post(const std::vector<nlohmann::json>& msgs,
                         const std::vector<std::vector<int>>& fds, const std::string& phase) {
  if (!alive_) return Error(ErrorKind::kHarness, "rank group is not running");
  for (int r = 0; r < options_.world; ++r) {
    static const std::vector<int> kNone;
    const std::vector<int>& f = fds.empty() ? kNone : fds[r];
    if (Status s = channels_[r].Send(msgs[r], f); !s.ok()) {
      return Fail({phase,
                   {},
                   r,
                   "rank " + std::to_string(r) + " " + DescribeExit(pids_[r]),
                   ErrorKind::kRuntimeError,
                   0});
    }
  }
  return Status::Ok();
}

Result<std::vector<Message>> WorkerGroup::Each(const std::vector<nlohmann::json>& msgs,
                                               const std::vector<std::vector<int>>& fds,
                                               double deadline_s, const std::string& phase,
                                               WorkerGroup* watched) {
  KF_RETURN_IF_ERROR(Post(msgs, fds, phase));
  return Collect(deadline_s, phase, watched);
}

int WorkerGroup::ExitedRank() const {
  for (size_t r = 0; r < pids_.size(); ++r) {
    // WNOWAIT: the zombie stays, and with it the status DescribeExit reads.
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(pids_[r]), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == pids_[r])
      return static_cast<int>(r);
  }
  return -1;
}

int WorkerGroup::StoppedServing() {
  if (!alive_) return -1;
  if (const int r = ExitedRank(); r >= 0) return r;
  for (int r = 0; r < options_.world; ++r) {
    if (!early_[r]) {
      auto m = channels_[r].Receive(milliseconds(0));
      if (!m.ok()) {
        if (m.status().kind() == ErrorKind::kTimeout) continue;
        return r;  // a closed channel: Collect sees it again and says how
      }
      early_[r] = std::move(m).value();
    }
    // A rank that is done serving says "ok" while the driver still verifies
    // its last call; an error means the calls it has left go unanswered.
    if (!proto::ReplyStatus(early_[r]->body, "reply").ok()) return r;
  }
  return -1;
}

Result<Message> WorkerGroup::Next(int r, milliseconds timeout) {
  if (early_[r]) {
    Message m = std::move(*early_[r]);
    early_[r].reset();
    return m;
  }
  return channels_[r].Receive(timeout);
}

Status WorkerGroup::FailExited(const std::string& phase) {
  const int r = ExitedRank();
  if (r < 0) return Status::Ok();
  return Fail({phase,
               {},
               r,
               options_.role + " rank " + std::to_string(r) + " " + DescribeExit(pids_[r]) +
                   " during " + phase,
               ErrorKind::kRuntimeError,
               0,
               {r}});
}

Result<std::vector<Message>> WorkerGroup::Collect(double deadline_s, const std::string& phase) {
  return Collect(deadline_s, phase, nullptr);
}

Result<std::vector<Message>> WorkerGroup::Collect(double deadline_s, const std::string& phase,
                                                  WorkerGroup* watched) {
  if (!alive_) return Error(ErrorKind::kHarness, "rank group is not running");
  std::vector<Message> replies(options_.world);
  std::vector<bool> done(options_.world, false);
  int remaining = options_.world;
  auto deadline =
      std::chrono::steady_clock::now() + milliseconds(static_cast<int64_t>(deadline_s * 1000));
  std::optional<GroupFailure> first_error;
  std::vector<int> failed, cancelled;
  // Who may say what (issue 31): a process that runs a kernel (the
  // candidate role) says only what its kernel did; whatever else it claims,
  // an infrastructure failure included, is a runtime error against it, so
  // that no kernel can make its own failure unscored. A harness rank may
  // blame the kernel it drives (a runtime error, a policy violation, or a
  // served group that did not answer a call in time: a timeout); anything
  // else it reports is a harness error.
  const bool untrusted = options_.role == "candidate";
  auto KindOfReply = [&](const Status& st) {
    const ErrorKind k = st.kind();
    if (k == ErrorKind::kRuntimeError || k == ErrorKind::kPolicyViolation) return k;
    if (untrusted) return ErrorKind::kRuntimeError;
    return k == ErrorKind::kDeadlock ? k : ErrorKind::kHarness;
  };
  // Once one rank has failed, the others get a short grace period to report
  // (they may be stuck in a barrier waiting for it; the abort flag frees them).
  while (remaining > 0) {
    if (std::chrono::steady_clock::now() >= deadline) break;
    for (int r = 0; r < options_.world; ++r) {
      if (done[r]) continue;
      auto m = Next(r, milliseconds(2));
      if (!m.ok()) {
        if (m.status().kind() == ErrorKind::kTimeout) continue;
        done[r] = true;
        --remaining;
        failed.push_back(r);
        if (!first_error) {
          std::string why = m.status().message() == "peer closed the channel"
                                ? DescribeExit(pids_[r])
                                : "sent a bad reply (" + m.status().message() + ")";
          first_error = GroupFailure{
              phase,
              {},
              r,
              options_.role + " rank " + std::to_string(r) + " " + why + " during " + phase,
              ErrorKind::kRuntimeError,
              deadline_s};
        }
        control_.RaiseAbort();
        deadline = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(2));
        continue;
      }
      done[r] = true;
      --remaining;
      replies[r] = std::move(m).value();
      Status st = proto::ReplyStatus(replies[r].body, "reply to " + phase);
      if (st.kind() == ErrorKind::kCancelled) cancelled.push_back(r);
      if (!st.ok() && st.kind() != ErrorKind::kCancelled) failed.push_back(r);
      if (!st.ok()) {
        if (!first_error && st.kind() != ErrorKind::kCancelled) {
          first_error = GroupFailure{phase, {}, r, st.message(), KindOfReply(st), deadline_s};
          if (untrusted && first_error->kind != st.kind()) {
            first_error->message = options_.role + " rank " + std::to_string(r) +
                                   " reported an error of kind '" +
                                   std::string(ErrorKindName(st.kind())) + "': " + st.message();
          }
        }
        control_.RaiseAbort();
        deadline = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(2));
      }
    }
    // One sweep takes at most 2 ms a rank: the served group's exit or error
    // is seen within milliseconds. Once a rank of ours has failed, that is
    // the report.
    if (watched != nullptr && !first_error && remaining > 0) {
      if (const int gone = watched->StoppedServing(); gone >= 0) {
        return Fail({phase,
                     {},
                     -1,
                     "abandoned " + phase + ": " + watched->options().role + " rank " +
                         std::to_string(gone) +
                         ", whose calls this group drives, has exited or reported an error",
                     ErrorKind::kCancelled,
                     deadline_s});
      }
    }
  }
  if (!first_error && !cancelled.empty()) {
    // "Cancelled" answers an abort we raised; said unprompted, it is a
    // failure of the rank that said it.
    const int r = cancelled.front();
    failed = cancelled;
    first_error =
        GroupFailure{phase,
                     {},
                     r,
                     options_.role + " rank " + std::to_string(r) + " answered 'cancelled' to " +
                         phase + " while nothing had aborted the group",
                     untrusted ? ErrorKind::kRuntimeError : ErrorKind::kHarness,
                     deadline_s};
  }
  if (first_error) {
    std::sort(failed.begin(), failed.end());
    first_error->failed_ranks = failed;
    return Fail(*first_error);
  }
  if (remaining > 0) {
    GroupFailure f{phase, {}, -1, "", ErrorKind::kDeadlock, deadline_s};
    for (int r = 0; r < options_.world; ++r) {
      if (!done[r]) f.hung_ranks.push_back(r);
    }
    return Fail(f);
  }
  return replies;
}

DriveFailure JudgeFailedDrive(WorkerGroup& served, const Status& driven, const std::string& phase) {
  Status own = served.FailExited(phase);
  // Whatever the driving rank said (a timeout, or a CUDA error of its own:
  // under MPS a kernel's fatal fault reaches every client on the GPU), what
  // the served group reports meanwhile comes first.
  if (own.ok() && served.alive()) {
    auto r = served.Collect(1.0, phase);
    if (!r.ok() && r.status().kind() != ErrorKind::kDeadlock) own = r.status();
  }
  served.Kill();
  if (!own.ok()) return {own, true};
  return {driven, false};
}

}  // namespace kforge::eval
