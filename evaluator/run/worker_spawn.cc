// Starting one worker process of a group: its command line, its scrubbed
// environment, and the fork + execve with only its own descriptors.
#include "run/worker_spawn.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>

#include "kforge/evaluator/canary.h"
#include "sandbox/sandbox.h"

namespace kforge::eval {

namespace {

// The cores this process may run on, in order.
std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

}  // namespace

std::optional<RankCpus> PinnedCpus(int world, int rank) {
  const char* v = std::getenv("KFORGE_PIN_RANKS");
  if (v == nullptr || std::string_view(v) != "1" || world < 1 || rank < 0 || rank >= world)
    return std::nullopt;
  const std::vector<int> cpus = AllowedCpus();
  const int n = static_cast<int>(cpus.size());
  if (n < world) return std::nullopt;
  RankCpus r;
  r.all = n;
  for (int k = rank * n / world; k < (rank + 1) * n / world; ++k) r.cpus.push_back(cpus[k]);
  return r;
}

std::vector<std::string> WorkerEnvironment(const GroupOptions& o) {
  std::map<std::string, std::string> extra = o.env;
  // NVLink multicast stays off on shared machines (it can take GPUs out of service).
  extra.insert_or_assign("NCCL_NVLS_ENABLE", std::string("0"));
  extra.erase(kEvalCanaryEnv);
  if (o.role == "harness" && !o.canary.empty()) extra[kEvalCanaryEnv] = o.canary;
  return sandbox::ScrubbedEnvironment(extra, /*keep_path=*/false);
}

Result<pid_t> SpawnWorker(const GroupOptions& o, int rank, int channel_fd, int control_fd,
                          int mailbox_fd, int output_fd) {
  std::vector<std::string> args = {o.worker_path.string(),
                                   "--role",
                                   o.role,
                                   "--rank",
                                   std::to_string(rank),
                                   "--world",
                                   std::to_string(o.world),
                                   "--device",
                                   std::to_string(o.devices[rank]),
                                   "--channel-fd",
                                   "3",
                                   "--control-fd",
                                   "4"};
  if (o.emulated) args.push_back("--emulated");
  if (o.candidate_nccl) args.push_back("--nccl");
  if (o.profile_rank0 && rank == 0) args.push_back("--profile");
  if (!o.mps_dir.empty()) args.insert(args.end(), {"--mps-dir", o.mps_dir});
  if (mailbox_fd >= 0) args.insert(args.end(), {"--mailbox-fd", "5"});
  if (!o.candidate_dir.empty()) args.insert(args.end(), {"--candidate-dir", o.candidate_dir});
  const std::optional<RankCpus> pinned = PinnedCpus(o.world, rank);
  cpu_set_t pin;
  CPU_ZERO(&pin);
  if (pinned) {
    for (int c : pinned->cpus) CPU_SET(c, &pin);
    // The spin decision counts the cores of every rank, not this rank's share.
    args.insert(args.end(), {"--spin-cpus", std::to_string(pinned->all)});
  }
  std::vector<std::string> env = WorkerEnvironment(o);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  // Sources above any target number, so that the dup2s cannot collide.
  int src[3] = {fcntl(channel_fd, F_DUPFD_CLOEXEC, 100), fcntl(control_fd, F_DUPFD_CLOEXEC, 100),
                mailbox_fd >= 0 ? fcntl(mailbox_fd, F_DUPFD_CLOEXEC, 100) : -1};
  const int out = output_fd >= 0 ? fcntl(output_fd, F_DUPFD_CLOEXEC, 100) : -1;
  const bool own_session = o.role == "candidate";
  const unsigned first_unused = src[2] >= 0 ? 6 : 5;
  // fork + execve, with everything prepared before the fork: the child of
  // this threaded process calls only async-signal-safe functions. (glibc's
  // posix_spawn is refused with EPERM on some sandboxed GPU hosts.)
  pid_t pid = fork();
  if (pid == 0) {
    for (int k = 0; k < 3; ++k) {
      if (src[k] >= 0 && dup2(src[k], 3 + k) < 0) _exit(126);
    }
    if (out >= 0 && (dup2(out, 1) < 0 || dup2(out, 2) < 0)) _exit(126);
    // Only the channel, control block and mailbox go with it (the worker
    // also closes whatever is left, and reports it, before any candidate code).
    close_range(first_unused, ~0U, 0);
    // Each worker leads its own process group (killed as one); a candidate
    // gets its own session too, away from the terminal.
    if (own_session) {
      setsid();
    } else {
      setpgid(0, 0);
    }
    if (pinned && sched_setaffinity(0, sizeof(pin), &pin) != 0) _exit(126);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  for (int fd : src) {
    if (fd >= 0) close(fd);
  }
  if (out >= 0) close(out);
  if (pid < 0) return Error(ErrorKind::kHarness, std::string("fork: ") + std::strerror(errno));
  return pid;
}

}  // namespace kforge::eval
