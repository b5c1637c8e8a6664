// Against a real Slurm (scripts/slurm-ci.sh start; ctest label `slurm`):
// `kforge slurm up` starts eval-servers as array tasks, a small compile-only
// run with the replay provider evaluates through them, `kforge slurm down`
// stops them, and the run's store holds exactly what the same run done on
// this machine holds. Also `kforge run --slurm`, servers inside a held
// allocation (srun --overlap), and a requeued task that comes back elsewhere.
// Skipped, saying why, when no Slurm answers.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include "kforge/core/fs.h"
#include "kforge/core/strings.h"
#include "kforge/core/subprocess.h"
#include "kforge/remote/client.h"
#include "kforge/remote/rendezvous.h"
#include "kforge/results/store.h"

namespace kforge::remote {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kRoot(KFORGE_SOURCE_ROOT);

std::string Cassette() { return "replay:" + (kRoot / "examples/demo/cassette.jsonl").string(); }

// A run's store as the comparable record: every session, turn and
// evaluation, without what differs between machines (timings, cache hits,
// ids, which server evaluated).
json StoreRecord(const fs::path& run_dir) {
  auto store = results::RunStore::Open(run_dir, true);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return json();
  auto runs = (*store)->ListRuns();
  EXPECT_TRUE(runs.ok() && runs->size() == 1u);
  if (!runs.ok() || runs->empty()) return json();
  const int64_t run = runs->front().id;
  json out = json::array();
  auto sessions = (*store)->ListSessions(run);
  std::map<int64_t, std::string> key_of;
  for (const auto& s : sessions.value()) {
    json session = {{"model", s.key.model},        {"task", s.key.task},   {"sample", s.key.sample},
                    {"world", s.key.world},        {"dtype", s.key.dtype}, {"state", s.state},
                    {"stop_reason", s.stop_reason}};
    key_of[s.id] = s.key.task;
    auto turns = (*store)->ListTurns(s.id);
    std::map<int64_t, int> index_of;
    for (const auto& t : turns.value()) {
      index_of[t.id] = t.index;
      session["turns"].push_back({{"index", t.index},
                                  {"prompt", t.prompt},
                                  {"reply", t.reply},
                                  {"feedback", t.feedback},
                                  {"kernel_sha", t.kernel_sha}});
    }
    auto evals = (*store)->ListEvaluations(s.id);
    for (const auto& e : evals.value()) {
      auto doc = (*store)->GetEvaluationDoc(e);
      json d = doc.ok() ? *doc : json();
      session["evaluations"].push_back(
          {{"turn", index_of[e.turn_id]},
           {"status", VerdictName(e.verdict)},
           {"message", d.value("message", "")},
           {"diagnostics",
            d.contains("compile") ? d["compile"].value("diagnostics", json()) : json()}});
    }
    out.push_back(session);
  }
  auto events = (*store)->ListEvents(run);
  std::multiset<std::string> compiled;
  for (const auto& e : events.value()) {
    if (e.kind == "compiled")
      compiled.insert(fmt::format("{} turn {}", key_of[e.detail.value("session", int64_t{0})],
                                  e.detail.value("turn", -1)));
  }
  return {{"sessions", out}, {"compiled", compiled}};
}

// The evaluation documents' "evaluated_by" hosts, to know where they ran.
int RemoteEvaluations(const fs::path& run_dir) {
  auto store = results::RunStore::Open(run_dir, true);
  if (!store.ok()) return -1;
  int n = 0;
  auto runs = (*store)->ListRuns();
  for (const auto& r : runs.value()) {
    auto sessions = (*store)->ListSessions(r.id);
    for (const auto& s : sessions.value()) {
      auto evals = (*store)->ListEvaluations(s.id);
      for (const auto& e : evals.value())
        n += (*store)->GetEvaluationDoc(e)->contains("evaluated_by");
    }
  }
  return n;
}

class SlurmCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    ProcessOptions o;
    o.timeout = std::chrono::seconds(20);
    auto sinfo = RealProcessRunner().Run({"sinfo", "-h", "-o", "%T"}, o);
    if (!sinfo.ok() || !sinfo->Succeeded() || TrimView(sinfo->out).empty()) {
      // CI starts a cluster and sets this: a skip there would hide a failure.
      if (std::getenv("KFORGE_REQUIRE_SLURM")) {
        FAIL() << "KFORGE_REQUIRE_SLURM is set but no Slurm cluster answers sinfo";
      }
      GTEST_SKIP() << "no Slurm cluster answers sinfo ("
                   << (sinfo.ok() ? TrimView(sinfo->err) : sinfo.status().message())
                   << "); start one with `scripts/slurm-ci.sh start` (root, Debian)";
    }
    auto d = MakeTempDir("kforge-slurm-cluster");
    ASSERT_TRUE(d.ok());
    dir_ = *d;
    // Slurm runs the servers from here: the directory must be readable by them.
    ::chmod(dir_.c_str(), 0755);
    env_ = {{"XDG_CACHE_HOME", (dir_ / "cache").string()},
            {"KFORGE_TASKS_DIR", (kRoot / "tasks").string()}};
  }
  void TearDown() override {
    if (dir_.empty()) return;
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  ProcessResult Kforge(std::vector<std::string> args,
                       std::map<std::string, std::string> extra = {}) {
    args.insert(args.begin(), KFORGE_BIN);
    ProcessOptions o;
    o.timeout = std::chrono::minutes(5);
    o.env = env_;
    for (auto& [k, v] : extra) o.env[k] = v;
    auto r = RealProcessRunner().Run(args, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : ProcessResult{};
  }

  ProcessResult Run(const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args = {"run",      "--models",
                                     Cassette(), "--tasks",
                                     "1,2",      "--compile-only",
                                     "--name",   name,
                                     "--out",    (dir_ / "runs").string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return Kforge(args);
  }

  bool SlurmListsNothing(const std::string& job) {
    ProcessOptions o;
    auto q = RealProcessRunner().Run({"squeue", "-h", "-j", job}, o);
    return q.ok() && TrimView(q->out).empty();
  }

  std::string JobOf(const fs::path& run_dir) {
    auto text = ReadFile(run_dir / "slurm" / "state.json");
    return text.ok() ? json::parse(*text).value("job_id", "") : "";
  }

  fs::path dir_;
  std::map<std::string, std::string> env_;
};

TEST_F(SlurmCluster, UpRunDownGivesTheStoreOfALocalRun) {
  const fs::path servers = dir_ / "servers";
  auto up = Kforge({"slurm", "up", "--nodes", "2", "--gpus-per-node", "1", "--compile-jobs", "1",
                    "--run-dir", servers.string(), "--wait", "120"});
  ASSERT_EQ(up.exit_code, 0) << up.err << up.out;
  EXPECT_NE(up.out.find("2 eval-server(s) up"), std::string::npos) << up.out;
  const std::string job = JobOf(servers);
  ASSERT_FALSE(job.empty());
  auto regs = ReadRegistrations(servers / "workers");
  ASSERT_EQ(regs.size(), 2u);
  // One array task each, each with its own (fake) GPU from Slurm's gres.
  auto token = ReadFile(servers / "slurm" / "tokens");
  ASSERT_TRUE(token.ok());
  std::string secret = Split(*token, '\n').back();
  std::set<std::string> devices, jobs;
  for (const auto& r : regs) {
    auto info = FetchServerInfo(r.url, secret);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    devices.insert(info->raw.value("cuda_visible_devices", "?"));
    jobs.insert(info->raw.value("slurm_job", ""));
  }
  EXPECT_EQ(devices, (std::set<std::string>{"0", "1"}));
  EXPECT_EQ(jobs, (std::set<std::string>{job + "_0", job + "_1"}));

  auto remote = Run("remote", {"--evaluators-dir", (servers / "workers").string(),
                               "--eval-token-file", (servers / "slurm" / "tokens").string()});
  ASSERT_EQ(remote.exit_code, 0) << remote.err;
  EXPECT_NE(remote.err.find("evaluating on 2 eval-server(s)"), std::string::npos) << remote.err;

  auto down = Kforge({"slurm", "down", "--run-dir", servers.string()});
  ASSERT_EQ(down.exit_code, 0) << down.err;
  EXPECT_TRUE(SlurmListsNothing(job));
  EXPECT_TRUE(ReadRegistrations(servers / "workers").empty());
  for (const char* task : {"0", "1"}) {
    auto log = ReadFile(servers / "slurm" / "logs" / (job + "_" + task + ".log"));
    ASSERT_TRUE(log.ok());
    EXPECT_NE(log->find("drained"), std::string::npos) << *log;  // SIGTERM, not a kill
  }

  auto local = Run("local", {});
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const json a = StoreRecord(dir_ / "runs" / "remote"), b = StoreRecord(dir_ / "runs" / "local");
  ASSERT_EQ(a["sessions"].size(), 2u) << a.dump(2);
  EXPECT_EQ(a, b) << "remote:\n" << a.dump(2) << "\nlocal:\n" << b.dump(2);
  EXPECT_EQ(RemoteEvaluations(dir_ / "runs" / "remote"), 2);  // both compile errors ran there
  EXPECT_EQ(RemoteEvaluations(dir_ / "runs" / "local"), 0);
}

TEST_F(SlurmCluster, RunWithSlurmStartsAndStopsItsOwnServers) {
  auto r = Run("own", {"--slurm", "--slurm-nodes", "1", "--slurm-gpus-per-node", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("submitted job array"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("are down"), std::string::npos) << r.err;
  const fs::path run_dir = dir_ / "runs" / "own";
  EXPECT_TRUE(ReadRegistrations(run_dir / "workers").empty());
  EXPECT_FALSE(fs::exists(run_dir / "slurm" / "state.json"));
  const json rec = StoreRecord(run_dir);
  ASSERT_EQ(rec["sessions"].size(), 2u);
  for (const auto& s : rec["sessions"]) EXPECT_EQ(s["stop_reason"], "evaluation needs a GPU");
  EXPECT_EQ(RemoteEvaluations(run_dir), 2);
}

TEST_F(SlurmCluster, InsideAnAllocationServersAreOverlappingSteps) {
  ProcessOptions o;
  auto held = RealProcessRunner().Run(
      {"sbatch", "--parsable", "--gres=gpu:1", "--output=/dev/null", "--wrap", "sleep 300"}, o);
  ASSERT_TRUE(held.ok() && held->Succeeded()) << (held.ok() ? held->err : "");
  const std::string allocation(TrimView(held->out));
  struct Release {
    std::string job;
    ~Release() {
      ProcessOptions o;
      (void)RealProcessRunner().Run({"scancel", job}, o);
    }
  } release{allocation};
  // A step needs the allocation to have started.
  bool running = false;
  for (int i = 0; i < 240 && !running; ++i) {
    auto q = RealProcessRunner().Run({"squeue", "-h", "-j", allocation, "-o", "%T"}, o);
    running = q.ok() && TrimView(q->out) == "RUNNING";
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ASSERT_TRUE(running) << "the allocation " << allocation << " did not start";
  const fs::path servers = dir_ / "step";
  auto up = Kforge({"slurm", "up", "--nodes", "1", "--gpus-per-node", "1", "--run-dir",
                    servers.string(), "--wait", "120"},
                   {{"SLURM_JOB_ID", allocation}});
  EXPECT_EQ(up.exit_code, 0) << up.err;
  EXPECT_NE(up.err.find("srun --overlap step"), std::string::npos) << up.err;
  auto regs = ReadRegistrations(servers / "workers");
  ASSERT_EQ(regs.size(), 1u) << up.err;
  EXPECT_EQ(regs[0].origin.filename().string().rfind("step-" + allocation + "-", 0), 0u);
  auto run = Run("stepped", {"--evaluators-dir", (servers / "workers").string(),
                             "--eval-token-file", (servers / "slurm" / "tokens").string()});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(RemoteEvaluations(dir_ / "runs" / "stepped"), 2);
  auto down = Kforge({"slurm", "down", "--run-dir", servers.string()});
  EXPECT_EQ(down.exit_code, 0) << down.err;
  EXPECT_TRUE(ReadRegistrations(servers / "workers").empty());
  // The allocation itself is the user's: still there, until they end it.
  EXPECT_FALSE(SlurmListsNothing(allocation));
}

TEST_F(SlurmCluster, ARequeuedTaskComesBackAndItsPortFollowsIt) {
  const fs::path servers = dir_ / "requeue";
  auto up = Kforge({"slurm", "up", "--nodes", "1", "--run-dir", servers.string(), "--wait", "120"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  const std::string job = JobOf(servers);
  auto before = ReadRegistrations(servers / "workers");
  ASSERT_EQ(before.size(), 1u);
  auto token = ReadFile(servers / "slurm" / "tokens");
  RemotePortOptions po;
  po.url = before[0].url;
  po.registration = before[0].origin;
  po.token = Split(*token, '\n').back();
  auto info = FetchServerInfo(before[0].url, po.token);
  ASSERT_TRUE(info.ok());
  po.task_suite_hash = info->task_suite_hash;
  auto port = MakeRemoteEvalService(po);
  // What a preemption does: Slurm signals the task and queues it again. The
  // server drains and unregisters; its requeued self registers anew.
  ProcessOptions o;
  auto rq = RealProcessRunner().Run({"scontrol", "requeue", job + "_0"}, o);
  ASSERT_TRUE(rq.ok() && rq->Succeeded()) << (rq.ok() ? rq->err : "");
  // Slurm holds a requeued job back for a while (BeginTime); let it go now.
  bool back = false;
  for (int i = 0; i < 240 && !back; ++i) {
    (void)RealProcessRunner().Run({"scontrol", "update", "JobId=" + job + "_0", "StartTime=now"},
                                  o);
    auto now = ReadRegistrations(servers / "workers");
    back = now.size() == 1 && now[0].pid != before[0].pid;
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ASSERT_TRUE(back) << "the requeued task did not register again";
  auto source = ReadFile(kRoot / "examples/demo/kernels" / "allreduce_naive.cu");
  eval::EvalRequest ej{
      "001_allreduce", source.ok() ? *source : std::string("x"), "k.cu", 2, "", true};
  auto doc = port->Evaluate(ej);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_EQ((*doc)["evaluated_by"]["host"].get<std::string>().empty(), false);
  auto log = ReadFile(servers / "slurm" / "logs" / (job + "_0.log"));
  EXPECT_NE(log->find("(restart 1)"), std::string::npos) << *log;
  auto down = Kforge({"slurm", "down", "--run-dir", servers.string()});
  EXPECT_EQ(down.exit_code, 0) << down.err;
}

}  // namespace
}  // namespace kforge::remote
