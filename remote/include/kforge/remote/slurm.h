// `kforge slurm up|down`: eval-servers on Slurm nodes, one per node, found
// through rendezvous files in the run directory (shared storage). One long
// job per node holds its warm evaluators; evaluations are HTTP requests to
// it, not Slurm jobs (a job per evaluation would pay scheduling and CUDA/NCCL
// start-up every time).
//
// Outside an allocation, `up` submits a job array (sbatch; one task per node,
// --requeue, SIGTERM before the time limit so servers drain). Inside one
// (SLURM_JOB_ID set) it starts a `srun --overlap` step of one task per node
// instead. Either way it waits until every server has registered, or says
// why not (the job's state and where its log is).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kforge/core/clock.h"
#include "kforge/core/status.h"
#include "kforge/core/subprocess.h"
#include "kforge/remote/rendezvous.h"

namespace kforge::remote {

struct SlurmOptions {
  int nodes = 1;
  int gpus_per_node = 0;   // --gres=gpu:G per server; 0: none (compile-only servers)
  std::string partition;   // empty: the cluster's default
  std::string time;        // --time; empty: the partition's default
  int cpus_per_node = 0;   // --cpus-per-task (compiles); 0: the cluster's default
  bool exclusive = false;  // --exclusive: a node to each server
  // Where workers/ (rendezvous files), slurm/ (the script, logs, state) go;
  // must be on storage every node sees, at the same path.
  std::filesystem::path run_dir;
  std::filesystem::path kforge;       // the kforge binary nodes run (same path on every node)
  std::filesystem::path tokens_file;  // the servers' tokens (mode 0600)
  std::filesystem::path tasks_dir;    // the servers' task suite
  int world = 2;
  int compile_jobs = 0;  // per server; 0: the server's default
  int drain_s = 300;     // SIGTERM this long before the time limit
  std::string job_name = "kforge-eval";
  double wait_s = 600;  // for every server to register
};

// The batch script `up` submits (a job array of `nodes` tasks). Pure.
std::string RenderSbatchScript(const SlurmOptions& options);
// The script each task of the `srun --overlap` step runs inside an
// allocation; it registers as workers/<tag>_<SLURM_PROCID>.json. Pure.
std::string RenderStepScript(const SlurmOptions& options, const std::string& tag);

// What `up` started; saved as <run_dir>/slurm/state.json for `down`.
struct SlurmJob {
  std::string mode;    // "batch" (a job array) or "step" (srun --overlap)
  std::string job_id;  // the array's job id, or the allocation's
  std::string prefix;  // the rendezvous files' names start with it
  std::string step_name;
  int srun_pid = 0;  // step mode: the srun process on this machine
  int nodes = 0;
  std::filesystem::path run_dir;
};

struct SlurmDeps {
  ProcessRunner* runner = nullptr;
  Clock* clock = nullptr;
  std::function<void(const std::string&)> say;  // progress for people; may be empty
  // The environment that decides batch or step mode (SLURM_JOB_ID); empty:
  // this process's.
  std::map<std::string, std::string> env;
};

// Submits (or starts the step), waits for `nodes` registrations, saves the
// state. On failure whatever was started is cancelled and the message says
// what Slurm reported and where the servers' logs are.
Result<SlurmJob> SlurmUp(const SlurmOptions& options, const SlurmDeps& deps);
// Cancels what `up` started in `run_dir` (the servers drain on SIGTERM),
// waits up to `wait_s` for it to end, and removes its rendezvous files.
Status SlurmDown(const std::filesystem::path& run_dir, const SlurmDeps& deps, double wait_s = 120);
Result<SlurmJob> LoadSlurmJob(const std::filesystem::path& run_dir);

// The registrations of `job`'s servers, in file order.
std::vector<Registration> JobRegistrations(const SlurmJob& job);

// One array task (or the step) as squeue sees it.
struct SlurmTaskState {
  std::string id;      // "123_4", or "123.5" for a step
  std::string state;   // PENDING, RUNNING, FAILED, ...
  std::string reason;  // squeue's reason or node list
};
// The job's tasks now; empty when Slurm no longer lists it.
Result<std::vector<SlurmTaskState>> QuerySlurmJob(const SlurmJob& job, ProcessRunner& runner);
// True for the states in which a task will not run again by itself.
bool SlurmStateEnded(const std::string& state);

// Watches a job while a run uses its servers: every `period` it asks squeue,
// reports each task's change of state through `say` (a preempted task that
// Slurm requeued shows PENDING, then RUNNING), and requeues (scontrol
// requeue) a task that failed (FAILED, NODE_FAIL, TIMEOUT, PREEMPTED,
// BOOT_FAIL, OUT_OF_MEMORY; not CANCELLED: that was someone's decision), at
// most `max_requeues` times each. Its evaluations meanwhile come back
// kSlotLost and go to the other servers.
class SlurmWatch {
 public:
  SlurmWatch(SlurmJob job, SlurmDeps deps, std::chrono::seconds period = std::chrono::seconds(15),
             int max_requeues = 3);
  ~SlurmWatch();  // stops the watching thread
  SlurmWatch(const SlurmWatch&) = delete;
  SlurmWatch& operator=(const SlurmWatch&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kforge::remote
