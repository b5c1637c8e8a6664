// `kforge run --rejudge RUN` (and `--resume` of a rejudge): the stored run's
// kernels judged again by this machine's evaluator, no model called
// (agent/rejudge.h). agent_commands.cc parses the flags.
#pragma once

#include <string>

#include "kforge/agent/run_config.h"

namespace kforge::cli {

struct RejudgeArgs {
  std::string source;  // --rejudge RUN, or the rejudge run --resume continues
  bool resume = false;
  agent::RunConfig here;  // name, out, filters and evaluation options (PlanRejudge)
  std::string json;       // --json FILE|-: the summary
};

// The exit status: 0, 1 when every session failed, 64 for usage errors.
int RunRejudge(const RejudgeArgs& args);

}  // namespace kforge::cli
