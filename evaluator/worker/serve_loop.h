// The request loop every worker runs: receive a request, dispatch it by op
// through a table, send the reply (with any descriptors), until "exit" or the
// coordinator goes away.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "kforge/core/status.h"
#include "protocol/channel.h"

namespace kforge::worker {

// A handler fills `fds` with descriptors to send along with its reply (the
// loop closes them after sending). Descriptors that came with the request are
// closed after the handler returns: a handler that keeps one dups it.
using Handler = std::function<Result<nlohmann::json>(const eval::Message&, std::vector<int>* fds)>;
using OpTable = std::vector<std::pair<std::string, Handler>>;

// A handler from a member function that takes the request, or nothing.
template <typename W>
Handler Bind(W* w, Result<nlohmann::json> (W::*fn)(const eval::Message&)) {
  return [w, fn](const eval::Message& m, std::vector<int>*) { return (w->*fn)(m); };
}
template <typename W>
Handler Bind(W* w, Result<nlohmann::json> (W::*fn)()) {
  return [w, fn](const eval::Message&, std::vector<int>*) { return (w->*fn)(); };
}

// Returns the process exit code. After a failed request, `fatal(status)`
// decides whether the process must stop (e.g. its CUDA context is broken).
int Serve(eval::Channel& channel, int rank, const OpTable& table,
          const std::function<bool(const Status&)>& fatal);

}  // namespace kforge::worker
