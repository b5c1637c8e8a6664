#include "slurm_setup.h"

#include <cstdio>

#include "kforge/core/clock.h"
#include "kforge/core/fs.h"
#include "kforge/core/subprocess.h"
#include "kforge/evaluator/task_select.h"
#include "kforge/remote/tokens.h"

namespace kforge::cli {

namespace fs = std::filesystem;

Status CompleteSlurmOptions(remote::SlurmOptions* o, const std::string& tokens_flag,
                            const std::string& tasks_dir_flag, fs::path* tokens_file) {
  o->run_dir = fs::absolute(o->run_dir).lexically_normal();
  o->tasks_dir = fs::absolute(eval::TasksDir(tasks_dir_flag)).lexically_normal();
  // The nodes run this very binary: it must sit on storage they share.
  std::error_code ec;
  o->kforge = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return Error(ErrorKind::kIo, "cannot find the running kforge (/proc/self/exe)");
  *tokens_file = tokens_flag.empty() ? o->run_dir / "slurm" / "tokens" : fs::path(tokens_flag);
  if (tokens_flag.empty()) {
    KF_RETURN_IF_ERROR(MakeDirs(tokens_file->parent_path()));
    KF_RETURN_IF_ERROR(remote::EnsureTokenFile(*tokens_file));
  }
  o->tokens_file = fs::absolute(*tokens_file).lexically_normal();
  return Status::Ok();
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
