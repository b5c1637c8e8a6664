// kforge-worker: one rank of an evaluation. Started by the coordinator (fork +
// exec, before any CUDA call), or with --probe to print the hardware card.
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>

#include "worker.h"

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
  app.add_option("--devices", devices, "devices to probe (default: all)")->delimiter(',');
  app.add_option("--channel-fd", args.channel_fd, "socket to the coordinator");
  app.add_option("--control-fd", args.control_fd, "shared control block (memfd)");
  app.add_option("--rank", args.rank);
  app.add_option("--world", args.world);
  app.add_option("--device", args.device);
  app.add_flag("--emulated", args.emulated, "ranks share a GPU: built-in collectives");
  CLI11_PARSE(app, argc, argv);
  if (probe) {
    std::printf("%s\n", kforge::worker::ProbeDevices(devices).dump(2).c_str());
    return 0;
  }
  if (args.channel_fd < 0 || args.control_fd < 0) {
    std::fprintf(stderr,
                 "kforge-worker: started without --channel-fd/--control-fd; it is run by kforge\n");
    return 2;
  }
  g_rank = args.rank;
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) signal(sig, OnFatalSignal);
  kforge::worker::Worker worker(args);
  return worker.Run();
}
