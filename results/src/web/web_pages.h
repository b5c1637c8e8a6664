// The web UI's pages as pure functions (request path parts in, HTML out), so
// they are tested without a socket. server.cc maps routes onto them.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::results::web {

struct Site {
  std::vector<std::filesystem::path> run_dirs;  // what the pages may show; keyed by directory name
};

// Resolves a run key (directory name) to its directory, or kNotFound.
Result<std::filesystem::path> FindRun(const Site& site, const std::string& key);

Result<std::string> LeaderboardPage(const Site& site, const std::string& by);
Result<std::string> RunPage(const Site& site, const std::string& run_key);
// {"state", "counts": {pending, running, done, stopped, evaluations, passed}, "events"}
Result<std::string> RunProgressJson(const Site& site, const std::string& run_key);
Result<std::string> SessionPage(const Site& site, const std::string& run_key, int64_t session_id);
Result<std::string> TaskPage(const Site& site, const std::string& task);

}  // namespace kforge::results::web
