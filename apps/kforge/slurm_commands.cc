// `kforge slurm up|down|status`: eval-servers on Slurm nodes (docs/scale.md).
#include <fmt/format.h>

#include <cstdio>

#include "command.h"
#include "exit_codes.h"
#include "kforge/core/fs.h"
#include "kforge/core/subprocess.h"
#include "kforge/remote/slurm.h"
#include "slurm_setup.h"

namespace kforge::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDefaultRunDir = "runs/eval-servers";

struct UpArgs {
  remote::SlurmOptions slurm;
  std::string run_dir = kDefaultRunDir, tokens, tasks_dir;
};

int RunUp(UpArgs a) {
  fs::path tokens;
  remote::SlurmOptions* o = &a.slurm;
  o->run_dir = a.run_dir;
  if (Status st = CompleteSlurmOptions(o, a.tokens, a.tasks_dir, &tokens); !st.ok())
    return FailWith("slurm up", st);
  auto job = remote::SlurmUp(*o, CliSlurmDeps("slurm up"));
  if (!job.ok()) return FailWith("slurm up", job.status());
  const auto regs = remote::JobRegistrations(*job);
  std::printf("%zu eval-server(s) up (Slurm %s %s); rendezvous directory %s\n", regs.size(),
              job->mode == "batch" ? "job" : "step in allocation", job->job_id.c_str(),
              (o->run_dir / "workers").string().c_str());
  for (const auto& reg : regs) std::printf("  %s  %s\n", reg.url.c_str(), reg.host.c_str());
  std::printf(
      "use them: kforge run --evaluators-dir %s --eval-token-file %s ...\n"
      "stop them: kforge slurm down --run-dir %s\n",
      (o->run_dir / "workers").string().c_str(), tokens.string().c_str(),
      o->run_dir.string().c_str());
  return kExitOk;
}

void AddSlurm(CLI::App& app, int& exit_code) {
  CLI::App* slurm = app.add_subcommand("slurm", "eval-servers on Slurm nodes: up, down, status");
  slurm->require_subcommand(1);

  auto a = std::make_shared<UpArgs>();
  remote::SlurmOptions* r = &a->slurm;
  CLI::App* up = slurm->add_subcommand(
      "up", "submit one eval-server per node and wait until they have registered");
  up->add_option("--nodes", r->nodes, "servers (nodes), one array task each")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  up->add_option("--gpus-per-node", r->gpus_per_node, "GPUs per server (--gres=gpu:G; 0: none)")
      ->check(CLI::Range(0, 64));
  up->add_option("--cpus-per-node", r->cpus_per_node, "CPUs per server, for compiles")
      ->check(CLI::Range(0, 4096));
  up->add_flag("--exclusive", r->exclusive, "a whole node to each server");
  up->add_option("--partition", r->partition, "Slurm partition (default: the cluster's)");
  up->add_option("--time", r->time, "time limit, e.g. 12:00:00 (default: the partition's)");
  up->add_option("--run-dir", a->run_dir,
                 "where workers/ and slurm/ go (shared storage, same path on every node)")
      ->capture_default_str();
  up->add_option("--tokens", a->tokens,
                 "the servers' tokens file (default: RUN_DIR/slurm/tokens, made if missing)");
  up->add_option("--tasks-dir", a->tasks_dir, "the servers' tasks (default: as kforge run)");
  up->add_option("--world", r->world, "ranks per evaluation")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  up->add_option("--compile-jobs", r->compile_jobs, "compiles at once per server")
      ->check(CLI::Range(1, 1024));
  up->add_option("--wait", r->wait_s, "seconds to wait for every server to register")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  up->callback([a, &exit_code] { exit_code = RunUp(*a); });

  auto down_dir = std::make_shared<std::string>(kDefaultRunDir);
  auto down_wait = std::make_shared<double>(120);
  CLI::App* down =
      slurm->add_subcommand("down", "cancel the servers `slurm up` started (they drain first)");
  down->add_option("--run-dir", *down_dir, "the run directory given to `slurm up`")
      ->capture_default_str();
  down->add_option("--wait", *down_wait, "seconds to wait for the job to end")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  down->callback([down_dir, down_wait, &exit_code] {
    Status st = remote::SlurmDown(*down_dir, CliSlurmDeps("slurm down"), *down_wait);
    exit_code = st.ok() ? kExitOk : FailWith("slurm down", st);
  });

  auto status_dir = std::make_shared<std::string>(kDefaultRunDir);
  CLI::App* status = slurm->add_subcommand("status", "the servers and their Slurm job");
  status->add_option("--run-dir", *status_dir, "the run directory given to `slurm up`")
      ->capture_default_str();
  status->callback([status_dir, &exit_code] {
    auto job = remote::LoadSlurmJob(fs::absolute(*status_dir).lexically_normal());
    if (!job.ok()) {
      exit_code = FailWith("slurm status", job.status());
      return;
    }
    auto tasks = remote::QuerySlurmJob(*job, RealProcessRunner());
    std::printf("Slurm %s %s (%d server(s) asked)\n", job->mode.c_str(), job->job_id.c_str(),
                job->nodes);
    if (tasks.ok()) {
      for (const auto& t : *tasks)
        std::printf("  %-16s %-12s %s\n", t.id.c_str(), t.state.c_str(), t.reason.c_str());
      if (tasks->empty()) std::printf("  (Slurm no longer lists it)\n");
    }
    for (const auto& reg : remote::JobRegistrations(*job))
      std::printf("  registered: %s on %s (%s)\n", reg.url.c_str(), reg.host.c_str(),
                  reg.origin.filename().string().c_str());
    exit_code = kExitOk;
  });
}

KF_COMMAND("slurm", AddSlurm);

}  // namespace
}  // namespace kforge::cli
