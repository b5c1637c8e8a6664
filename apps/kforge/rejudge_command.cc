#include "rejudge_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "exit_codes.h"
#include "json_output.h"
#include "kforge/agent/rejudge_plan.h"
#include "kforge/core/clock.h"
#include "run_pools.h"

namespace kforge::cli {

int RunRejudge(const RejudgeArgs& a) {
  agent::PlanEnv env;
  env.resume = a.resume;
  env.remote_pools = MakeRemotePools;
  auto plan_or = agent::PlanRejudge(a.source, a.here, env);
  if (!plan_or.ok()) return FailWith("run", plan_or.status());
  agent::RejudgePlan& plan = **plan_or;
  for (const auto& notice : plan.notices) std::fprintf(stderr, "kforge run: %s\n", notice.c_str());
  std::vector<std::vector<int>> cpus(3);
  cpus[static_cast<size_t>(agent::Pool::kGpu)] = plan.pools->gpu_cpus;
  cpus[static_cast<size_t>(agent::Pool::kCompile)] = plan.pools->compile_cpus;
  auto executor = agent::MakeThreadExecutor(std::move(cpus));
  agent::ProgressView progress(
      stderr, agent::WantsLiveView(isatty(fileno(stderr)) != 0, std::getenv("TERM")), RealClock());
  agent::RunDeps deps = plan.Deps();
  deps.clock = &RealClock();
  deps.executor = executor.get();
  deps.progress = &progress;
  const std::string store = plan.run_dir.string();
  size_t kernels = 0;
  for (const auto& s : plan.spec.sessions) {
    for (const auto& t : s.turns) kernels += !t.kernel.empty();
  }
  std::fprintf(stderr,
               "kforge run %s: %s '%s' (%s): %zu session(s), %zu kernel(s), no model called, "
               "store %s\n",
               plan.config.name.c_str(), a.resume ? "resuming the rejudge of" : "rejudging",
               plan.config.rejudge_of.c_str(), plan.config.rejudge_of_store.c_str(),
               plan.spec.sessions.size(), kernels, store.c_str());
  if (plan.pools->remote)
    std::fprintf(stderr, "kforge run: evaluating on %s\n", plan.pools->where.c_str());
  if (plan.spec.profile)
    std::fprintf(stderr, "kforge run: every GPU evaluation profiles its kernel (--profile)\n");
  auto summary = agent::ExecuteRejudge(plan.spec, deps);
  if (!summary.ok()) {
    std::fprintf(stderr, "kforge run: %s (the rejudge is resumable: kforge run --resume %s)\n",
                 summary.status().ToString().c_str(), plan.config.name.c_str());
    return kExitFailed;
  }
  if (!a.json.empty()) {
    nlohmann::json doc = agent::RunSummaryJson(*summary);
    doc["store"] = store;
    doc["rejudge_of"] = {{"run", plan.config.rejudge_of}, {"store", plan.config.rejudge_of_store}};
    if (Status st = WriteJson(a.json, doc); !st.ok()) return FailWith("run", st);
  }
  if (a.json != "-")
    std::printf("%sstore: %s\n", agent::RenderRunSummary(*summary).c_str(), store.c_str());
  return summary->AllFailed() ? kExitFailed : kExitOk;
}

}  // namespace kforge::cli
