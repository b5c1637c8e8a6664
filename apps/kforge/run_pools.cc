#include "run_pools.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "kforge/agent/adapters.h"
#include "kforge/evaluator/hardware.h"
#include "kforge/remote/connect.h"
#include "kforge/remote/slurm.h"
#include "kforge/remote/tokens.h"
#include "slurm_setup.h"

namespace kforge::cli {
namespace {

Status RemotePools(const agent::RunConfig& cfg, const std::vector<remote::Endpoint>& endpoints,
                   const std::string& suite_hash, const std::filesystem::path& token_file,
                   agent::EvalPools* p) {
  KF_ASSIGN_OR_RETURN(std::string token, remote::LoadClientToken(token_file, "KFORGE_EVAL_TOKEN"));
  remote::ConnectOptions o;
  o.token = token;
  o.task_suite_hash = suite_hash;
  o.world = cfg.world;
  o.need_gpu = !cfg.compile_only;
  o.liveness_s = cfg.evaluator_liveness_s;
  KF_ASSIGN_OR_RETURN(remote::RemoteSlots slots, remote::ConnectEvaluators(endpoints, o));
  p->remote = true;
  p->compile_only = cfg.compile_only || slots.gpu.empty();
  p->no_gpu_reason =
      cfg.compile_only ? "--compile-only" : "the evaluation servers have no GPU slots";
  if (!slots.hardware.is_null()) {
    Result<eval::HardwareCard> card = eval::HardwareCardFromJson(slots.hardware);
    if (!card.ok()) return card.status().WithContext("the eval-server's /v1/info");
    p->card = *card;
  }
  std::vector<std::string> names;
  for (const auto& s : slots.servers) {
    names.push_back(
        fmt::format("{} ({} GPU, {} compile slot(s))", s.url, s.gpu_slots, s.compile_slots));
  }
  p->where = fmt::format("{} eval-server(s): {}", slots.servers.size(), fmt::join(names, ", "));
  if (!p->compile_only) {
    for (auto& port : slots.gpu) {
      p->gpu.push_back(port.get());
      p->owned.push_back(std::move(port));
    }
    p->gpu_names = slots.gpu_names;
    p->gpu_groups = slots.gpu_groups;
  }
  // --compile-jobs caps the compiles in flight over all servers.
  size_t compiles = slots.compile.size();
  if (cfg.compile_jobs > 0) compiles = std::min(compiles, static_cast<size_t>(cfg.compile_jobs));
  for (size_t i = 0; i < compiles; ++i) {
    p->compile.push_back(slots.compile[i].get());
    p->owned.push_back(std::move(slots.compile[i]));
    p->compile_names.push_back(slots.compile_names[i]);
    p->compile_groups.push_back(slots.compile_groups[i]);
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<agent::EvalPools>> MakeRemotePools(const agent::RunConfig& cfg,
                                                          const std::string& suite_hash,
                                                          const std::filesystem::path& run_dir) {
  auto p = std::make_unique<agent::EvalPools>();
  std::filesystem::path token_file = cfg.eval_token_file;
  std::vector<remote::Endpoint> endpoints;
  for (const auto& url : cfg.evaluators) {
    std::string u = url;
    while (!u.empty() && u.back() == '/') u.pop_back();
    endpoints.push_back({u, {}});
  }
  if (!cfg.evaluators_dir.empty()) {
    std::vector<remote::Endpoint> found = remote::EndpointsIn(cfg.evaluators_dir);
    if (found.empty())
      return Error(
          ErrorKind::kInvalidInput,
          fmt::format("--evaluators-dir {}: no eval-server registered there", cfg.evaluators_dir));
    endpoints.insert(endpoints.end(), found.begin(), found.end());
  }
  if (cfg.slurm_nodes > 0) {
    // Servers for this run only, registered under its directory; they are
    // cancelled (and drain) when the pools go, however the run ends.
    remote::SlurmOptions o;
    o.nodes = cfg.slurm_nodes;
    o.gpus_per_node =
        cfg.slurm_gpus_per_node > 0 || cfg.compile_only ? cfg.slurm_gpus_per_node : cfg.world;
    o.partition = cfg.slurm_partition;
    o.time = cfg.slurm_time;
    o.world = cfg.world;
    o.run_dir = run_dir;
    KF_RETURN_IF_ERROR(CompleteSlurmOptions(&o, cfg.eval_token_file, cfg.tasks_dir, &token_file));
    remote::SlurmDeps deps = CliSlurmDeps("run");
    KF_ASSIGN_OR_RETURN(remote::SlurmJob job, remote::SlurmUp(o, deps));
    auto watch = std::make_shared<remote::SlurmWatch>(job, deps);
    const std::filesystem::path dir = o.run_dir;
    p->release = [watch, dir, deps]() mutable {
      watch.reset();
      Status st = remote::SlurmDown(dir, deps);
      if (!st.ok()) deps.say("stopping the servers: " + st.ToString());
    };
    for (const remote::Registration& reg : remote::JobRegistrations(job))
      endpoints.push_back({reg.url, reg.origin});
  }
  if (endpoints.empty()) return std::unique_ptr<agent::EvalPools>();
  KF_RETURN_IF_ERROR(RemotePools(cfg, endpoints, suite_hash, token_file, p.get()));
  return p;
}

}  // namespace kforge::cli
