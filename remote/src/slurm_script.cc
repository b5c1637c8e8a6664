// The scripts `kforge slurm up` gives Slurm, as text (tested line by line).
#include <fmt/format.h>

#include "kforge/remote/slurm.h"

namespace kforge::remote {
namespace {

// One shell word, single-quoted.
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// The server's command line, up to its --register argument.
std::string ServerCommand(const SlurmOptions& o) {
  std::string cmd = fmt::format("exec {} eval-server --listen 0.0.0.0:0 --tokens {} --tasks-dir {}",
                                Quote(o.kforge.string()), Quote(o.tokens_file.string()),
                                Quote(o.tasks_dir.string()));
  cmd += fmt::format(" --world {}", o.world);
  if (o.gpus_per_node == 0) cmd += " --gpus none";
  if (o.compile_jobs > 0) cmd += fmt::format(" --compile-jobs {}", o.compile_jobs);
  return cmd;
}

}  // namespace

std::string RenderSbatchScript(const SlurmOptions& o) {
  const std::string logs = (o.run_dir / "slurm" / "logs").string();
  const std::string workers = (o.run_dir / "workers").string();
  std::string s = "#!/bin/bash\n";
  s += "# kforge eval-servers, one per array task (written by `kforge slurm up`; docs/scale.md).\n";
  s += fmt::format("#SBATCH --job-name={}\n", o.job_name);
  s += fmt::format("#SBATCH --array=0-{}\n", o.nodes - 1);
  s += "#SBATCH --nodes=1\n";
  s += "#SBATCH --ntasks=1\n";
  if (o.gpus_per_node > 0) s += fmt::format("#SBATCH --gres=gpu:{}\n", o.gpus_per_node);
  if (o.cpus_per_node > 0) s += fmt::format("#SBATCH --cpus-per-task={}\n", o.cpus_per_node);
  if (o.exclusive) s += "#SBATCH --exclusive\n";
  if (!o.partition.empty()) s += fmt::format("#SBATCH --partition={}\n", o.partition);
  if (!o.time.empty()) s += fmt::format("#SBATCH --time={}\n", o.time);
  // A preempted task or one on a failed node comes back; its server
  // rewrites the same rendezvous file and the coordinator follows it.
  s += "#SBATCH --requeue\n";
  // SIGTERM to the server (the batch shell execs it) before the time
  // limit: it drains, answering every job it took, and unregisters.
  s += fmt::format("#SBATCH --signal=B:TERM@{}\n", o.drain_s);
  s += "#SBATCH --open-mode=append\n";
  s += fmt::format("#SBATCH --output={}/%A_%a.log\n", logs);
  s += "set -euo pipefail\n";
  s += "echo \"kforge slurm: array task ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID} on "
       "$(hostname) (restart ${SLURM_RESTART_COUNT:-0}), "
       "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}\" >&2\n";
  s += ServerCommand(o) +
       fmt::format(
           " \\\n  --register {}/\"${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}.json\"\n",
           Quote(workers));
  return s;
}

std::string RenderStepScript(const SlurmOptions& o, const std::string& tag) {
  const std::string workers = (o.run_dir / "workers").string();
  std::string s = "#!/bin/bash\n";
  s += "# One kforge eval-server per task of a `srun --overlap` step (kforge slurm up inside an\n";
  s += "# allocation; docs/scale.md).\n";
  s += "set -euo pipefail\n";
  s += "echo \"kforge slurm: step ${SLURM_JOB_ID}.${SLURM_STEP_ID} task ${SLURM_PROCID} on "
       "$(hostname), CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}\" >&2\n";
  s += ServerCommand(o) +
       fmt::format(" \\\n  --register {}/{}_\"${{SLURM_PROCID}}.json\"\n", Quote(workers), tag);
  return s;
}

}  // namespace kforge::remote
