// kforge-worker: one rank of an evaluation, in one of two roles (started by
// the coordinator with a scrubbed environment, before any CUDA call):
//   --role harness    the trusted process: memory, inputs, baseline, clock
//   --role candidate  the sandboxed process that runs a candidate's kernel
// or, with --probe, prints the hardware card.
#include <execinfo.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>

#include "candidate.h"
#include "harness.h"
#include "probe.h"
#include "protocol/wait.h"
#include "sandbox/sandbox.h"
#include "sandbox/self_test.h"

namespace {

int g_rank = -1;

// A crash inside a kernel's host code or the harness: say which rank and where
// on stderr (the coordinator reports the signal), then die by the signal.
void OnFatalSignal(int sig) {
  char msg[96];
  int n = std::snprintf(msg, sizeof(msg), "kforge-worker rank %d: fatal signal %d (%s)\n", g_rank,
                        sig, strsignal(sig));
  if (n > 0) (void)!write(2, msg, static_cast<size_t>(n));
  void* frames[48];
  int depth = backtrace(frames, 48);
  backtrace_symbols_fd(frames, depth, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kforge-worker: runs one rank of a kforge evaluation"};
  kforge::worker::WorkerArgs args;
  bool probe = false;
  std::vector<int> devices;
  app.add_flag("--probe", probe, "print the hardware card (JSON) and exit");
  bool sandbox_check = false;
  app.add_flag(
      "--sandbox-check", sandbox_check,
      "confine a child as a candidate would be, try the known escapes, print what held (JSON); "
      "exit 0 only if every layer applied and every escape was refused");
  app.add_option("--devices", devices, "devices to probe (default: all)")->delimiter(',');
  app.add_option("--role", args.role, "harness or candidate")
      ->check(CLI::IsMember({"harness", "candidate"}));
  app.add_option("--channel-fd", args.channel_fd, "socket to the coordinator");
  app.add_option("--control-fd", args.control_fd, "shared control block (memfd)");
  app.add_option("--mailbox-fd", args.mailbox_fd, "candidate: the timing mailbox (memfd)");
  app.add_option("--rank", args.rank);
  app.add_option("--world", args.world);
  app.add_option("--device", args.device);
  app.add_option("--candidate-dir", args.candidate_dir, "candidate: the directory of its kernel");
  app.add_option("--mps-dir", args.mps_dir, "the MPS pipe directory");
  app.add_flag("--emulated", args.emulated, "ranks share a GPU: built-in collectives");
  app.add_flag("--nccl", args.nccl,
               "candidate: it will start NCCL (real GPUs, collectives allowed)");
  app.add_flag("--profile", args.profile,
               "candidate: profile the calls of serve requests that ask for it (CUPTI)");
  int spin_cpus = 0;
  app.add_option("--spin-cpus", spin_cpus,
                 "the cores every rank together may use, where this one is pinned to its share "
                 "(default: this process's affinity)");
  CLI11_PARSE(app, argc, argv);
  if (sandbox_check) {
    auto r = kforge::sandbox::RunSelfTest();
    if (!r.ok()) {
      std::fprintf(stderr, "kforge-worker: %s\n", r.status().ToString().c_str());
      return 2;
    }
    std::printf("%s\n", r->ToJson().dump(2).c_str());
    return r->Passed() ? 0 : 1;
  }
  if (probe) {
    std::printf("%s\n", kforge::worker::ProbeDevices(devices).dump(2).c_str());
    return 0;
  }
  if (args.role.empty()) {
    std::fprintf(stderr, "kforge-worker: started without --role; it is run by kforge\n");
    return 2;
  }
  g_rank = args.rank;
  // Spin while waiting for a peer only where every rank's two processes have a core.
  kforge::eval::proto::SetSpinLimit(kforge::eval::proto::SpinLimitFor(
      args.world, spin_cpus > 0 ? spin_cpus : kforge::eval::proto::UsableCpus()));
  if (args.role == "candidate") {
    if (args.mailbox_fd < 0 || args.candidate_dir.empty()) {
      std::fprintf(stderr, "kforge-worker: a candidate needs --mailbox-fd and --candidate-dir\n");
      return 2;
    }
    // Before CUDA starts any thread: every later thread inherits these.
    kforge::sandbox::Report report;
    kforge::sandbox::Policy policy =
        kforge::sandbox::CandidatePolicy(args.candidate_dir, args.mps_dir);
    if (args.nccl) {
      // NCCL bootstraps over the host's loopback: no private network then.
      policy.private_network = false;
      policy.private_shm = false;  // its shared-memory transport between ranks
      policy.allow_tcp = true;
      policy.allow_sockets = true;
    }
    kforge::sandbox::ApplyEarlyLayers(policy, {args.channel_fd, args.control_fd, args.mailbox_fd},
                                      &report);
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) signal(sig, OnFatalSignal);
    kforge::worker::CandidateWorker worker(args, std::move(report));
    return worker.Run();
  }
  // The harness holds the expected outputs: nobody else may read its memory.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) signal(sig, OnFatalSignal);
  kforge::worker::HarnessWorker worker(args);
  return worker.Run();
}
