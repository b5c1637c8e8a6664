// `kforge slurm up|down`: submitting the servers, waiting for them to
// register, and cancelling them, through sbatch/srun/squeue/scancel.
#include "kforge/remote/slurm.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "kforge/core/fs.h"
#include "kforge/core/strings.h"
#include "kforge/remote/tokens.h"

extern char** environ;

namespace kforge::remote {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path StateFile(const fs::path& run_dir) { return run_dir / "slurm" / "state.json"; }
fs::path LogDir(const fs::path& run_dir) { return run_dir / "slurm" / "logs"; }

void Say(const SlurmDeps& d, const std::string& line) {
  if (d.say) d.say(line);
}

Result<ProcessResult> RunTool(const SlurmDeps& d, std::vector<std::string> argv) {
  ProcessOptions o;
  o.timeout = std::chrono::seconds(60);
  KF_ASSIGN_OR_RETURN(ProcessResult r, d.runner->Run(argv, o));
  return r;
}

std::string Env(const SlurmDeps& d, const char* name) {
  if (!d.env.empty()) {
    auto it = d.env.find(name);
    return it == d.env.end() ? "" : it->second;
  }
  const char* v = std::getenv(name);
  return v ? v : "";
}

// A path that goes into #SBATCH lines and scripts unquoted in places.
Status PlainPath(const fs::path& p, const char* what) {
  const std::string s = p.string();
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '%' || c == '\'' || c == '"' || c == '\\' ||
        c == '$' || c == '`') {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("{} {}: a path with '{}' cannot go into a Slurm script; use one "
                               "without spaces, quotes, '%' or '$'",
                               what, s, c == '\n' ? "newline" : std::string(1, c)));
    }
  }
  return Status::Ok();
}

Status SaveJob(const SlurmJob& j) {
  json doc = {{"schema", "kforge.slurm_job/1"},
              {"mode", j.mode},
              {"job_id", j.job_id},
              {"prefix", j.prefix},
              {"step_name", j.step_name},
              {"srun_pid", j.srun_pid},
              {"nodes", j.nodes}};
  return WriteFileAtomic(StateFile(j.run_dir), doc.dump(2) + "\n");
}

// The last lines of each server log of the job, for a failure message.
std::string LogTails(const SlurmJob& j) {
  std::string out;
  std::error_code ec;
  std::vector<fs::path> logs;
  for (fs::directory_iterator it(LogDir(j.run_dir), ec), end; !ec && it != end; it.increment(ec)) {
    // Batch: <job>_<task>.log; step: <tag>_<rank>.log and <tag>.srun.log.
    const std::string stem =
        j.mode == "batch" ? j.job_id + "_" : j.prefix.substr(0, j.prefix.size() - 1);
    if (it->path().filename().string().rfind(stem, 0) == 0) logs.push_back(it->path());
  }
  std::sort(logs.begin(), logs.end());
  for (const auto& log : logs) {
    auto text = ReadFile(log);
    if (!text.ok()) continue;
    std::vector<std::string> lines = Split(*text, '\n');
    const size_t from = lines.size() > 8 ? lines.size() - 8 : 0;
    out += fmt::format("\n  --- {} (last lines) ---", log.string());
    for (size_t i = from; i < lines.size(); ++i) out += "\n  " + lines[i];
  }
  return out;
}

// Starts srun in its own session, detached from this process's terminal,
// its output in `log`. Returns its pid.
Result<int> SpawnDetached(const std::vector<std::string>& argv, const fs::path& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  // It outlives this process: none of our descriptors (the store, sockets)
  // may stay open in it.
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return Error(ErrorKind::kNotFound, fmt::format("cannot run {}: {}", argv[0], strerror(rc)));
  return static_cast<int>(pid);
}

// A child of this process is reaped when it has exited (a zombie still
// answers kill 0); another process is alive while kill 0 reaches it.
bool Alive(int pid) {
  if (pid <= 0) return false;
  int status = 0;
  const pid_t w = ::waitpid(pid, &status, WNOHANG);
  if (w == pid) return false;
  return ::kill(pid, 0) == 0;
}

std::string Describe(const std::vector<SlurmTaskState>& tasks) {
  std::vector<std::string> parts;
  for (const auto& t : tasks) {
    const bool bracketed = !t.reason.empty() && t.reason.front() == '(';
    parts.push_back(t.reason.empty() ? fmt::format("{} {}", t.id, t.state)
                    : bracketed      ? fmt::format("{} {} {}", t.id, t.state, t.reason)
                                     : fmt::format("{} {} ({})", t.id, t.state, t.reason));
  }
  return parts.empty() ? "none listed" : fmt::format("{}", fmt::join(parts, ", "));
}

Status Cancel(const SlurmJob& j, const SlurmDeps& d) {
  if (j.mode == "batch") {
    KF_ASSIGN_OR_RETURN(ProcessResult r, RunTool(d, {"scancel", j.job_id}));
    if (!r.Succeeded())
      return Error(ErrorKind::kIo, fmt::format("scancel {}: {}", j.job_id, TrimView(r.err)));
    return Status::Ok();
  }
  // A step: SIGTERM to its tasks (the servers drain), by its id. A plain
  // scancel of a step, or SIGTERM to srun, kills the tasks at once.
  KF_ASSIGN_OR_RETURN(std::vector<SlurmTaskState> steps, QuerySlurmJob(j, *d.runner));
  for (const auto& s : steps) (void)RunTool(d, {"scancel", "--signal=TERM", s.id});
  if (steps.empty() && Alive(j.srun_pid)) ::kill(j.srun_pid, SIGTERM);
  return Status::Ok();
}

}  // namespace

bool SlurmStateEnded(const std::string& state) {
  static const std::set<std::string> kEnded = {
      "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE",      "FAILED",
      "NODE_FAIL", "PREEMPTED", "TIMEOUT",   "OUT_OF_MEMORY", "SPECIAL_EXIT"};
  return kEnded.count(state) > 0;
}

Result<std::vector<SlurmTaskState>> QuerySlurmJob(const SlurmJob& j, ProcessRunner& runner) {
  ProcessOptions o;
  o.timeout = std::chrono::seconds(60);
  std::vector<std::string> argv =
      j.mode == "batch"
          ? std::vector<std::string>{"squeue", "-h", "-r", "-j", j.job_id, "-o", "%i|%T|%R"}
          : std::vector<std::string>{"squeue", "-h", "-s", "-j", j.job_id, "-o", "%i|%j"};
  KF_ASSIGN_OR_RETURN(ProcessResult r, runner.Run(argv, o));
  std::vector<SlurmTaskState> out;
  // An id squeue no longer knows is an error there ("Invalid job id"): gone.
  if (!r.Succeeded()) return out;
  for (const std::string& line : Split(r.out, '\n')) {
    std::vector<std::string> f = Split(line, '|');
    if (f.size() < 2) continue;
    if (j.mode == "batch") {
      out.push_back({f[0], f[1], f.size() > 2 ? f[2] : ""});
    } else if (f[1] == j.step_name) {
      out.push_back({f[0], "RUNNING", ""});
    }
  }
  return out;
}

std::vector<Registration> JobRegistrations(const SlurmJob& j) {
  std::vector<Registration> out;
  for (Registration& r : ReadRegistrations(j.run_dir / "workers")) {
    if (r.origin.filename().string().rfind(j.prefix, 0) == 0) out.push_back(std::move(r));
  }
  return out;
}

Result<SlurmJob> LoadSlurmJob(const fs::path& run_dir) {
  const fs::path file = StateFile(run_dir);
  if (!fs::exists(file))
    return Error(ErrorKind::kNotFound, fmt::format("no servers were started in {} (no {})",
                                                   run_dir.string(), file.string()));
  KF_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return Error(ErrorKind::kInvalidInput, file.string() + ": not JSON");
  SlurmJob j;
  j.mode = doc.value("mode", "");
  j.job_id = doc.value("job_id", "");
  j.prefix = doc.value("prefix", "");
  j.step_name = doc.value("step_name", "");
  j.srun_pid = doc.value("srun_pid", 0);
  j.nodes = doc.value("nodes", 0);
  j.run_dir = run_dir;
  if ((j.mode != "batch" && j.mode != "step") || j.job_id.empty() || j.prefix.empty())
    return Error(ErrorKind::kInvalidInput, file.string() + ": not a kforge.slurm_job/1 state");
  return j;
}

Result<SlurmJob> SlurmUp(const SlurmOptions& in, const SlurmDeps& d) {
  SlurmOptions o = in;
  if (o.nodes < 1) return Error(ErrorKind::kInvalidInput, "--nodes must be at least 1");
  o.run_dir = fs::absolute(o.run_dir).lexically_normal();
  o.tokens_file = fs::absolute(o.tokens_file).lexically_normal();
  o.tasks_dir = fs::absolute(o.tasks_dir).lexically_normal();
  KF_RETURN_IF_ERROR(PlainPath(o.run_dir, "--run-dir"));
  KF_RETURN_IF_ERROR(PlainPath(o.kforge, "kforge binary"));
  KF_RETURN_IF_ERROR(PlainPath(o.tokens_file, "--tokens"));
  KF_RETURN_IF_ERROR(PlainPath(o.tasks_dir, "--tasks-dir"));
  KF_RETURN_IF_ERROR(CheckPrivateFile(o.tokens_file, "tokens file"));
  if (::access(o.kforge.c_str(), X_OK) != 0)
    return Error(ErrorKind::kNotFound, o.kforge.string() + ": not an executable kforge");
  if (auto old = LoadSlurmJob(o.run_dir); old.ok()) {
    auto tasks = QuerySlurmJob(*old, *d.runner);
    const bool live = (tasks.ok() && !tasks->empty()) || Alive(old->srun_pid);
    if (live) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("eval-servers are already up for {} (Slurm job {}): `kforge slurm "
                               "down --run-dir {}` first",
                               o.run_dir.string(), old->job_id, o.run_dir.string()));
    }
  }
  KF_RETURN_IF_ERROR(MakeDirs(o.run_dir / "workers"));
  KF_RETURN_IF_ERROR(MakeDirs(LogDir(o.run_dir)));

  SlurmJob job;
  job.run_dir = o.run_dir;
  job.nodes = o.nodes;
  const std::string allocation = Env(d, "SLURM_JOB_ID");
  if (allocation.empty()) {
    const fs::path script = o.run_dir / "slurm" / "eval-servers.sbatch";
    KF_RETURN_IF_ERROR(WriteFileAtomic(script, RenderSbatchScript(o)));
    KF_ASSIGN_OR_RETURN(ProcessResult r, RunTool(d, {"sbatch", "--parsable", script.string()}));
    if (!r.Succeeded())
      return Error(ErrorKind::kIo, fmt::format("sbatch {}: {}", script.string(), TrimView(r.err)));
    std::string id(TrimView(r.out));
    id = id.substr(0, id.find(';'));  // "ID;cluster" on multi-cluster sites
    if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
      return Error(ErrorKind::kIo, fmt::format("sbatch printed no job id: '{}'", r.out));
    job.mode = "batch";
    job.job_id = id;
    job.prefix = id + "_";
    Say(d, fmt::format("submitted job array {} ({} server(s)); script {}, logs {}", id, o.nodes,
                       script.string(), LogDir(o.run_dir).string()));
  } else {
    // Inside an allocation: a step of one task per node, overlapping the
    // allocation's other steps (the coordinator's own shell among them).
    std::random_device rd;
    const uint32_t nonce = rd();
    const std::string tag = fmt::format("step-{}-{:08x}", allocation, nonce);
    const fs::path script = o.run_dir / "slurm" / (tag + ".sh");
    KF_RETURN_IF_ERROR(WriteFileAtomic(script, RenderStepScript(o, tag)));
    job.mode = "step";
    job.job_id = allocation;
    job.prefix = tag + "_";
    job.step_name = o.job_name + "-" + tag;
    std::vector<std::string> argv = {
        "srun",
        "--jobid=" + allocation,
        "--overlap",
        fmt::format("--nodes={}", o.nodes),
        fmt::format("--ntasks={}", o.nodes),
        "--ntasks-per-node=1",
        "--job-name=" + job.step_name,
        fmt::format("--output={}/{}_%t.log", LogDir(o.run_dir).string(), tag)};
    if (o.gpus_per_node > 0) argv.push_back(fmt::format("--gres=gpu:{}", o.gpus_per_node));
    if (o.cpus_per_node > 0) argv.push_back(fmt::format("--cpus-per-task={}", o.cpus_per_node));
    argv.push_back("bash");
    argv.push_back(script.string());
    KF_ASSIGN_OR_RETURN(job.srun_pid, SpawnDetached(argv, LogDir(o.run_dir) / (tag + ".srun.log")));
    Say(d, fmt::format("inside allocation {}: started a srun --overlap step of {} server(s); "
                       "logs {}",
                       allocation, o.nodes, LogDir(o.run_dir).string()));
  }
  KF_RETURN_IF_ERROR(SaveJob(job));

  // Wait for every server to register, watching the job as we go.
  const auto deadline =
      d.clock->Now() + std::chrono::duration_cast<Clock::Duration>(
                           std::chrono::duration<double>(std::max(0.0, o.wait_s)));
  auto next_look = d.clock->Now();
  std::string last_seen;
  auto fail = [&](const std::string& why) -> Status {
    (void)Cancel(job, d);
    std::error_code ec;
    fs::remove(StateFile(job.run_dir), ec);
    return Error(ErrorKind::kIo, why + LogTails(job));
  };
  while (true) {
    const size_t registered = JobRegistrations(job).size();
    if (registered >= static_cast<size_t>(o.nodes)) break;
    if (d.clock->Now() >= next_look) {
      next_look = d.clock->Now() + std::chrono::seconds(2);
      KF_ASSIGN_OR_RETURN(std::vector<SlurmTaskState> tasks, QuerySlurmJob(job, *d.runner));
      const std::string seen = Describe(tasks);
      if (seen != last_seen) {
        Say(d, fmt::format("{} of {} server(s) registered; Slurm: {}", registered, o.nodes, seen));
        last_seen = seen;
      }
      if (job.mode == "batch") {
        const bool listed = !tasks.empty();
        const bool all_running_or_waiting =
            std::none_of(tasks.begin(), tasks.end(),
                         [](const SlurmTaskState& t) { return SlurmStateEnded(t.state); });
        if (!listed || !all_running_or_waiting) {
          return fail(
              fmt::format("Slurm job {} ended before its {} server(s) registered ({} "
                          "did); squeue: {}",
                          job.job_id, o.nodes, registered, seen));
        }
      } else if (!Alive(job.srun_pid)) {
        return fail(
            fmt::format("the srun step in allocation {} exited before its {} server(s) "
                        "registered ({} did)",
                        job.job_id, o.nodes, registered));
      }
    }
    if (d.clock->Now() >= deadline) {
      return fail(fmt::format(
          "{} of {} server(s) registered within {:.0f} s; Slurm: {}; "
          "rendezvous directory {}",
          registered, o.nodes, o.wait_s, last_seen, (job.run_dir / "workers").string()));
    }
    d.clock->SleepFor(std::chrono::milliseconds(250));
  }
  for (const Registration& r : JobRegistrations(job))
    Say(d, fmt::format("server {} on {} ({} GPU, {} compile slot(s)), registered in {}", r.url,
                       r.host, r.gpu_slots, r.compile_slots, r.origin.filename().string()));
  return job;
}

Status SlurmDown(const fs::path& run_dir_in, const SlurmDeps& d, double wait_s) {
  const fs::path run_dir = fs::absolute(run_dir_in).lexically_normal();
  KF_ASSIGN_OR_RETURN(SlurmJob job, LoadSlurmJob(run_dir));
  KF_RETURN_IF_ERROR(Cancel(job, d));
  Say(d, fmt::format("cancelled Slurm {} {}; waiting for the servers to drain",
                     job.mode == "batch" ? "job" : "step of allocation", job.job_id));
  const auto deadline = d.clock->Now() + std::chrono::duration_cast<Clock::Duration>(
                                             std::chrono::duration<double>(wait_s));
  while (true) {
    KF_ASSIGN_OR_RETURN(std::vector<SlurmTaskState> tasks, QuerySlurmJob(job, *d.runner));
    const bool ended =
        std::all_of(tasks.begin(), tasks.end(),
                    [](const SlurmTaskState& t) { return SlurmStateEnded(t.state); }) &&
        !Alive(job.srun_pid);
    if (ended) break;
    if (d.clock->Now() >= deadline) {
      return Error(ErrorKind::kTimeout, fmt::format("Slurm still lists {} after {:.0f} s: {}",
                                                    job.job_id, wait_s, Describe(tasks)));
    }
    d.clock->SleepFor(std::chrono::milliseconds(250));
  }
  // Servers that drained removed their files; ones killed did not.
  for (const Registration& r : JobRegistrations(job)) {
    std::error_code ec;
    fs::remove(r.origin, ec);
  }
  std::error_code ec;
  fs::remove(StateFile(run_dir), ec);
  Say(d, fmt::format("the servers of {} are down", job.job_id));
  return Status::Ok();
}

}  // namespace kforge::remote
