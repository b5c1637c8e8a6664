// `kforge serve`: the web UI over run stores. Pages are rendered on the
// server (HTML + inline SVG, a few lines of inline script for live progress);
// nothing is fetched from elsewhere, so it works offline.
//
// Every request opens the stores read-only and closes them again, so a run
// being written is never blocked and every page shows the latest commit.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::results {

struct ServerOptions {
  std::string host = "127.0.0.1";  // loopback unless asked otherwise
  int port = 8080;                 // 0 = any free port (see Server::port)
  std::filesystem::path runs_root = "runs";
  // Run directories to serve; empty = every store under runs_root, rescanned per request.
  std::vector<std::filesystem::path> run_dirs;
};

class Server {
 public:
  // Binds the socket (so the port is known and taken) without serving yet.
  static Result<std::unique_ptr<Server>> Bind(const ServerOptions& options);
  ~Server();
  int port() const;
  // Serves until Stop() is called from another thread.
  Status Run();
  void Stop();

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kforge::results
