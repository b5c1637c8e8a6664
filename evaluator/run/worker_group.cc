#include "run/worker_group.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "kforge/core/log.h"

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
  auto g = std::unique_ptr<WorkerGroup>(new WorkerGroup());
  g->options_ = options;
  if (static_cast<int>(options.devices.size()) != options.world) {
    return Error(ErrorKind::kInvalidInput, "one device per rank is required");
  }
  if (access(options.worker_path.c_str(), X_OK) != 0) {
    return Error(ErrorKind::kNotFound,
                 "kforge-worker not found at " + options.worker_path.string());
  }
  KF_ASSIGN_OR_RETURN(g->control_, ControlBlock::Create(options.world));
  for (int r = 0; r < options.world; ++r) {
    KF_ASSIGN_OR_RETURN(auto pair, MakeSocketPair());
    pid_t pid = fork();
    if (pid < 0) return Error(ErrorKind::kHarness, std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      // Child: fds 3 and 4 are the channel and the control block; nothing else
      // leaks. Move both out of the way first: either may already be fd 3 or 4.
      int channel_fd = fcntl(pair.second, F_DUPFD_CLOEXEC, 100);
      int control_fd = fcntl(g->control_.fd(), F_DUPFD_CLOEXEC, 100);
      if (channel_fd < 0 || control_fd < 0) _exit(126);
      dup2(channel_fd, 3);
      dup2(control_fd, 4);
      fcntl(3, F_SETFD, 0);
      fcntl(4, F_SETFD, 0);
      setpgid(0, 0);
      for (const auto& [k, v] : options.env) setenv(k.c_str(), v.c_str(), 1);
      // NVLink multicast stays off on shared machines (it can take GPUs out of service).
      setenv("NCCL_NVLS_ENABLE", "0", 1);
      std::vector<std::string> args = {options.worker_path.string(),
                                       "--channel-fd",
                                       "3",
                                       "--control-fd",
                                       "4",
                                       "--rank",
                                       std::to_string(r),
                                       "--world",
                                       std::to_string(options.world),
                                       "--device",
                                       std::to_string(options.devices[r])};
      if (options.emulated) args.push_back("--emulated");
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(pair.second);
    g->pids_.push_back(pid);
    g->channels_.emplace_back(pair.first);
  }
  g->alive_ = true;
  // Hellos (each rank created its CUDA context), then NCCL when it is used.
  g->hellos_.resize(options.world);
  auto deadline = std::chrono::steady_clock::now() +
                  milliseconds(static_cast<int64_t>(options.start_deadline_s * 1000));
  for (int r = 0; r < options.world; ++r) {
    auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    auto m = g->channels_[r].Receive(std::max(left, milliseconds(1)));
    if (!m.ok() || m->body.value("op", "") != "hello") {
      std::string why = !m.ok() ? m.status().message() : m->body.value("error", "bad hello");
      if (!m.ok() && m.status().kind() == ErrorKind::kIo)
        why = "rank " + std::to_string(r) + " " + DescribeExit(g->pids_[r]);
      g->Kill();
      return Error(ErrorKind::kHarness, "starting rank " + std::to_string(r) + " on device " +
                                            std::to_string(options.devices[r]) + " failed: " + why);
    }
    g->hellos_[r] = m->body;
  }
  if (!options.emulated) {
    std::string id = g->hellos_[0].value("nccl_id", "");
    auto r = g->All({{"op", "nccl_init"}, {"id", id}}, options.start_deadline_s, "nccl_init");
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
  alive_ = false;
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
  if (!alive_) return Error(ErrorKind::kHarness, "rank group is not running");
  for (int r = 0; r < options_.world; ++r) {
    if (Status s = channels_[r].Send(msgs[r]); !s.ok()) {
      return Fail({phase,
                   {},
                   r,
                   "rank " + std::to_string(r) + " " + DescribeExit(pids_[r]),
                   ErrorKind::kRuntimeError,
                   deadline_s});
    }
  }
  std::vector<Message> replies(options_.world);
  std::vector<bool> done(options_.world, false);
  int remaining = options_.world;
  auto deadline =
      std::chrono::steady_clock::now() + milliseconds(static_cast<int64_t>(deadline_s * 1000));
  std::optional<GroupFailure> first_error;
  // Once one rank has failed, the others get a short grace period to report
  // (they may be stuck in a barrier waiting for it; the abort flag frees them).
  while (remaining > 0) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    bool progressed = false;
    for (int r = 0; r < options_.world; ++r) {
      if (done[r]) continue;
      auto m = channels_[r].Receive(milliseconds(2));
      if (!m.ok()) {
        if (m.status().kind() == ErrorKind::kTimeout) continue;
        done[r] = true;
        --remaining;
        if (!first_error) {
          std::string why = m.status().message() == "peer closed the channel"
                                ? DescribeExit(pids_[r])
                                : "sent a bad reply (" + m.status().message() + ")";
          first_error = GroupFailure{phase,
                                     {},
                                     r,
                                     "rank " + std::to_string(r) + " " + why + " during " + phase,
                                     ErrorKind::kRuntimeError,
                                     deadline_s};
        }
        control_.RaiseAbort();
        deadline = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(2));
        continue;
      }
      progressed = true;
      done[r] = true;
      --remaining;
      replies[r] = std::move(m).value();
      if (!replies[r].body.value("ok", false)) {
        std::string kind = replies[r].body.value("kind", "harness");
        bool cancelled = kind == "cancelled";
        if (!first_error && !cancelled) {
          ErrorKind k = kind == "runtime_error" ? ErrorKind::kRuntimeError : ErrorKind::kHarness;
          first_error = GroupFailure{
              phase, {}, r, replies[r].body.value("error", "unknown error"), k, deadline_s};
        }
        control_.RaiseAbort();
        deadline = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(2));
      }
    }
    (void)progressed;
  }
  if (first_error) return Fail(*first_error);
  if (remaining > 0) {
    GroupFailure f{phase, {}, -1, "", ErrorKind::kDeadlock, deadline_s};
    for (int r = 0; r < options_.world; ++r) {
      if (!done[r]) f.hung_ranks.push_back(r);
    }
    return Fail(f);
  }
  return replies;
}

}  // namespace kforge::eval
