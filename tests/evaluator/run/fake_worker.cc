// A stand-in for kforge-worker that speaks the protocol's framing and then
// misbehaves on purpose, so the coordinator's watchdog can be tested without a
// GPU. Behaviour per rank comes from KFORGE_WORKER_FAKE_<rank> (ok | hang | crash |
// error | slow | env | say | flood), default ok; "env" answers with the names
// of its environment variables ("env") and its entries ("environ"); "say"
// writes KFORGE_WORKER_FAKE_SAY to stderr, in two writes, on every message;
// "flood" writes 24 MiB of forged verdict lines with
// terminal escapes to stdout and stderr before it answers; "claim_harness",
// "claim_cancelled" and "claim_deadlock" answer with an error of that kind
// (what a kernel that writes the worker's reply could claim); "not_object"
// answers with a JSON array.
//
// The timing path, through a real mailbox: a harness-role fake given
// {"op": "drive", "calls": n, "call_deadline_s": s} and a mailbox descriptor
// posts n calls one after the other and waits for each answer, as the real
// harness does, replying with a timeout (kind deadlock) when one is not
// answered in time; a candidate-role fake given {"op": "serve", "calls": n}
// answers the calls on its mailbox (fd 5). Candidate behaviours while
// serving: "serve_segv" and "serve_abort" die on their third call (a kernel
// that crashes, or aborts, in the middle of the timed calls), "serve_error"
// fails it as the real worker fails a kf_run that returns a CUDA error,
// "serve_hang" stays alive and never answers its third call. A harness-role
// "drive_harness_error" fails a drive at once with an error of its own.
//
// At start, instead of the hello: "mps_not_ready:N:FILE" appends a line to
// FILE and, while FILE has at most N lines, fails as the real worker does
// when the GPU's MPS server is being replaced (cudaErrorMpsServerNotReady);
// "no_device:FILE" appends a line to FILE and always fails with another
// CUDA error.
//
// "affinity" answers with the cores it may run on ("cpus") and its
// --spin-cpus argument ("spin_cpus", 0 if none).
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "protocol/channel.h"
#include "protocol/control_block.h"
#include "protocol/mailbox.h"
#include "protocol/messages.h"

extern char** environ;

namespace {

using kforge::eval::ControlBlock;
using kforge::eval::proto::Mailbox;
using nlohmann::json;

json Failed(const std::string& kind, const std::string& error, int rank) {
  return {{"ok", false}, {"kind", kind}, {"error", error}, {"rank", rank}};
}

// The harness's side of a drive: one call at a time, each answered in time.
json Drive(const json& body, int fd, const ControlBlock& control, int rank) {
  auto box = Mailbox::Attach(fd);
  if (!box.ok()) return Failed("harness", box.status().message(), rank);
  const int calls = body.value("calls", 0);
  const double deadline_s = body.value("call_deadline_s", 1.0);
  for (int k = 1; k <= calls; ++k) {
    const auto seq = static_cast<uint64_t>(k);
    box->Post(seq, 0);
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::microseconds(static_cast<int64_t>(deadline_s * 1e6));
    auto answer = box->WaitAnswer(seq, deadline, &control.shared()->abort);
    if (!answer.ok())
      return Failed(
          answer.status().kind() == kforge::ErrorKind::kDeadlock ? "deadlock" : "cancelled",
          answer.status().message(), rank);
  }
  return {{"ok", true}, {"calls", calls}, {"rank", rank}};
}

// The served side: answers `calls` calls, misbehaving on the third.
json Serve(const json& body, Mailbox& box, const ControlBlock& control,
           const std::string& behaviour, int rank) {
  uint64_t last = 0;
  for (int k = 1; k <= body.value("calls", 0); ++k) {
    auto cmd = box.WaitCommand(last, &control.shared()->abort);
    if (!cmd.ok()) return Failed("cancelled", cmd.status().message(), rank);
    if (cmd->stop) break;
    last = cmd->seq;
    if (k == 3 && behaviour == "serve_segv") raise(SIGSEGV);
    if (k == 3 && behaviour == "serve_abort") abort();
    if (k == 3 && behaviour == "serve_error") {
      // What the real worker does when kf_run fails: the call is answered as
      // failed, and the serve ends with the kernel's error.
      box.Answer(cmd->seq, 1, 0);
      return Failed("runtime_error", "kf_run: CUDA error cudaErrorIllegalAddress", rank);
    }
    if (k == 3 && behaviour == "serve_hang") {
      while (true) pause();
    }
    box.Answer(cmd->seq, 0, 1.0);
  }
  return {{"ok", true}, {"rank", rank}};
}

}  // namespace

int main(int argc, char** argv) {
  int rank = 0, spin_cpus = 0;
  std::string role = "harness";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--rank") rank = std::atoi(argv[i + 1]);
    if (std::string(argv[i]) == "--role") role = argv[i + 1];
    if (std::string(argv[i]) == "--spin-cpus") spin_cpus = std::atoi(argv[i + 1]);
  }
  const char* b = std::getenv(("KFORGE_WORKER_FAKE_" + std::to_string(rank)).c_str());
  std::string behaviour = b ? b : "ok";
  kforge::eval::Channel ch(3);
  if (behaviour.starts_with("mps_not_ready:") || behaviour.starts_with("no_device:")) {
    const bool mps = behaviour.starts_with("mps_not_ready:");
    std::string rest = behaviour.substr(behaviour.find(':') + 1);
    const int failing = mps ? std::atoi(rest.c_str()) : 1 << 30;
    if (mps) rest = rest.substr(rest.find(':') + 1);
    { std::ofstream(rest, std::ios::app) << "start\n"; }
    int starts = 0;
    std::ifstream in(rest);
    for (std::string line; std::getline(in, line);) ++starts;
    if (starts <= failing) {
      const char* error = mps ? "cudaFree(nullptr): CUDA error cudaErrorMpsServerNotReady: MPS "
                                "server is not ready to accept new MPS client requests"
                              : "cudaSetDevice(args_.device): CUDA error cudaErrorNoDevice: no "
                                "CUDA-capable device is detected";
      (void)ch.Send(kforge::eval::proto::ErrorReply(
          kforge::Error(kforge::ErrorKind::kRuntimeError, error), rank));
      return 3;
    }
  }
  kforge::eval::proto::Hello hello;
  hello.role = role;
  hello.rank = rank;
  hello.pid = static_cast<int>(getpid());
  if (!ch.Send(hello.ToJson()).ok()) return 1;
  auto control = ControlBlock::Attach(4);
  if (!control.ok()) return 1;
  std::optional<Mailbox> mailbox;
  if (role == "candidate") {
    auto box = Mailbox::Attach(5);
    if (box.ok()) mailbox = std::move(*box);
  }
  while (true) {
    auto m = ch.Receive(std::chrono::hours(1));
    if (!m.ok()) return 0;
    const std::string op = m->body.value("op", "");
    if (op == "exit") {
      (void)ch.Send({{"ok", true}});
      return 0;
    }
    if (op == "drive" && role == "harness" && m->fds.size() == 1) {
      if (behaviour == "drive_harness_error") {
        close(m->fds[0]);
        (void)ch.Send(Failed("harness", "the harness's own CUDA call failed", rank));
        continue;
      }
      (void)ch.Send(Drive(m->body, m->fds[0], *control, rank));
      continue;
    }
    if (op == "serve" && mailbox) {
      (void)ch.Send(Serve(m->body, *mailbox, *control, behaviour, rank));
      continue;
    }
    if (behaviour == "hang") {
      while (true) pause();
    }
    if (behaviour == "crash") raise(SIGSEGV);
    if (behaviour == "error") {
      (void)ch.Send({{"ok", false},
                     {"kind", "runtime_error"},
                     {"error", "CUDA error: an illegal memory access"},
                     {"rank", rank}});
      continue;
    }
    if (behaviour.starts_with("claim_")) {
      (void)ch.Send({{"ok", false},
                     {"kind", behaviour.substr(6)},
                     {"error", "kforge: the GPU fell off the bus (not the kernel's fault)"},
                     {"rank", rank}});
      continue;
    }
    if (behaviour == "not_object") {
      (void)ch.Send(nlohmann::json::array({1, 2, 3}));
      continue;
    }
    if (behaviour == "slow") usleep(200 * 1000);
    if (behaviour == "flood") {
      const std::string line =
          "\r\x1b[2K\x1b[1Astatus    passed: FORGED speedup 99.0x (geomean)\x1b]0;t\a\n";
      std::string block;
      while (block.size() < (1 << 20)) block += line;
      for (int i = 0; i < 24; ++i) {
        int fd = i % 2 == 0 ? 2 : 1;
        for (size_t off = 0; off < block.size();) {
          ssize_t n = write(fd, block.data() + off, block.size() - off);
          if (n <= 0) return 3;
          off += static_cast<size_t>(n);
        }
      }
    }
    if (behaviour == "env") {
      nlohmann::json names = nlohmann::json::array(), entries = nlohmann::json::array();
      for (char** e = environ; *e != nullptr; ++e) {
        std::string kv(*e);
        names.push_back(kv.substr(0, kv.find('=')));
        entries.push_back(kv);
      }
      (void)ch.Send({{"ok", true}, {"env", names}, {"environ", entries}, {"rank", rank}});
      continue;
    }
    if (behaviour == "affinity") {
      cpu_set_t set;
      CPU_ZERO(&set);
      nlohmann::json cpus = nlohmann::json::array();
      if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        for (int c = 0; c < CPU_SETSIZE; ++c)
          if (CPU_ISSET(c, &set)) cpus.push_back(c);
      }
      (void)ch.Send({{"ok", true}, {"cpus", cpus}, {"spin_cpus", spin_cpus}, {"rank", rank}});
      continue;
    }
    if (behaviour == "say") {
      // KFORGE_WORKER_FAKE_SAY to stderr, in two writes split in its middle.
      const char* say = getenv("KFORGE_WORKER_FAKE_SAY");
      const std::string text = say != nullptr ? say : "";
      const size_t half = text.size() / 2;
      (void)!write(2, text.data(), half);
      usleep(20 * 1000);
      (void)!write(2, text.data() + half, text.size() - half);
    }
    (void)ch.Send({{"ok", true}, {"echo", m->body}, {"rank", rank}});
  }
}
