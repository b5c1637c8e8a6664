#include "serve_loop.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "protocol/messages.h"

namespace kforge::worker {

int Serve(eval::Channel& channel, int rank, const OpTable& table,
          const std::function<bool(const Status&)>& fatal) {
  const bool trace = std::getenv("KFORGE_WORKER_TRACE") != nullptr;
  while (true) {
    auto msg = channel.Receive(std::chrono::hours(24 * 365));
    if (!msg.ok()) {
      if (msg.status().kind() != ErrorKind::kIo ||
          msg.status().message() != "peer closed the channel") {
        std::fprintf(stderr, "kforge-worker rank %d: %s\n", rank, msg.status().ToString().c_str());
      }
      return 0;
    }
    const nlohmann::json& body = msg->body;
    std::string op = body.is_object() && body.contains("op") && body["op"].is_string()
                         ? body["op"].get<std::string>()
                         : "";
    if (trace) std::fprintf(stderr, "kforge-worker rank %d: %s\n", rank, op.c_str());
    if (op == eval::proto::op::kExit) {
      (void)channel.Send({{"ok", true}});
      return 0;
    }
    std::vector<int> fds;
    Result<nlohmann::json> reply = Error(ErrorKind::kHarness, "unknown op '" + op + "'");
    for (const auto& [name, handler] : table) {
      if (name != op) continue;
      try {
        reply = handler(*msg, &fds);
      } catch (const std::exception& e) {
        reply = Error(ErrorKind::kHarness, std::string("worker: ") + e.what());
      }
      break;
    }
    for (int fd : msg->fds) close(fd);
    nlohmann::json out;
    if (reply.ok()) {
      out = std::move(reply).value();
      if (!out.is_object()) out = nlohmann::json::object();
      out["ok"] = true;
    } else {
      out = eval::proto::ErrorReply(reply.status(), rank);
    }
    Status sent = channel.Send(out, fds);
    for (int fd : fds) close(fd);
    if (!sent.ok()) {
      std::fprintf(stderr, "kforge-worker rank %d: cannot reply: %s\n", rank,
                   sent.message().c_str());
      return 4;
    }
    if (!reply.ok() && fatal(reply.status())) {
      std::fprintf(stderr, "kforge-worker rank %d: stopping after: %s\n", rank,
                   reply.status().message().c_str());
      return 5;
    }
  }
}

}  // namespace kforge::worker
