#include "slurm_setup.h"

#include <cstdio>

#include "kforge/agent/task_select.h"
#include "kforge/core/clock.h"
#include "kforge/core/fs.h"
#include "kforge/core/subprocess.h"
#include "kforge/remote/tokens.h"

namespace kforge::cli {

namespace fs = std::filesystem;

Result<remote::SlurmOptions> BuildSlurmOptions(const SlurmRequest& r, fs::path* tokens_file) {
  remote::SlurmOptions o;
  o.nodes = r.nodes;
  o.gpus_per_node = r.gpus_per_node;
  o.cpus_per_node = r.cpus_per_node;
  o.exclusive = r.exclusive;
  o.partition = r.partition;
  o.time = r.time;
  o.run_dir = fs::absolute(r.run_dir).lexically_normal();
  o.world = r.world;
  o.compile_jobs = r.compile_jobs;
  o.wait_s = r.wait_s;
  o.tasks_dir = fs::absolute(agent::TasksDir(r.tasks_dir)).lexically_normal();
  // The nodes run this very binary: it must sit on storage they share.
  std::error_code ec;
  o.kforge = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return Error(ErrorKind::kIo, "cannot find the running kforge (/proc/self/exe)");
  *tokens_file = r.tokens.empty() ? o.run_dir / "slurm" / "tokens" : fs::path(r.tokens);
  if (r.tokens.empty()) {
    KF_RETURN_IF_ERROR(MakeDirs(tokens_file->parent_path()));
    KF_RETURN_IF_ERROR(remote::EnsureTokenFile(*tokens_file));
  }
  o.tokens_file = fs::absolute(*tokens_file).lexically_normal();
  return o;
}

remote::SlurmDeps CliSlurmDeps(const std::string& command) {
  remote::SlurmDeps d;
  d.runner = &RealProcessRunner();
  d.clock = &RealClock();
  d.say = [command](const std::string& line) {
    std::fprintf(stderr, "kforge %s: %s\n", command.c_str(), line.c_str());
  };
  return d;
}

}  // namespace kforge::cli
