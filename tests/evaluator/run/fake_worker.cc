// A stand-in for kforge-worker that speaks the protocol's framing and then
// misbehaves on purpose, so the coordinator's watchdog can be tested without a
// GPU. Behaviour per rank comes from KFORGE_WORKER_FAKE_<rank> (ok | hang | crash |
// error | slow | env | flood), default ok; "env" answers with the names of its
// environment variables; "flood" writes 24 MiB of forged verdict lines with
// terminal escapes to stdout and stderr before it answers; "claim_harness",
// "claim_cancelled" and "claim_deadlock" answer with an error of that kind
// (what a kernel that writes the worker's reply could claim); "not_object"
// answers with a JSON array.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "protocol/channel.h"
#include "protocol/messages.h"

extern char** environ;

int main(int argc, char** argv) {
  int rank = 0;
  std::string role = "harness";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--rank") rank = std::atoi(argv[i + 1]);
    if (std::string(argv[i]) == "--role") role = argv[i + 1];
  }
  const char* b = std::getenv(("KFORGE_WORKER_FAKE_" + std::to_string(rank)).c_str());
  std::string behaviour = b ? b : "ok";
  kforge::eval::Channel ch(3);
  kforge::eval::proto::Hello hello;
  hello.role = role;
  hello.rank = rank;
  hello.pid = static_cast<int>(getpid());
  if (!ch.Send(hello.ToJson()).ok()) return 1;
  while (true) {
    auto m = ch.Receive(std::chrono::hours(1));
    if (!m.ok()) return 0;
    if (m->body.value("op", "") == "exit") {
      (void)ch.Send({{"ok", true}});
      return 0;
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
      nlohmann::json names = nlohmann::json::array();
      for (char** e = environ; *e != nullptr; ++e) {
        std::string kv(*e);
        names.push_back(kv.substr(0, kv.find('=')));
      }
      (void)ch.Send({{"ok", true}, {"env", names}, {"rank", rank}});
      continue;
    }
    (void)ch.Send({{"ok", true}, {"echo", m->body}, {"rank", rank}});
  }
}
