// Real `kforge eval-server` processes on loopback, for what is about process
// death: SIGTERM drains (the job in flight is answered, new ones are refused,
// exit 0) and SIGKILL mid-job (the run requeues the job on another server and
// completes with no evaluation lost or recorded twice). Compile-only, no GPU.
//
// To have a job in flight for as long as the test needs, a server is given a
// CUDA toolkit whose nvcc waits for a release file before running the real
// one: the server, its evaluator and the jail are all real.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <functional>
#include <future>
#include <set>

#include "child.h"
#include "fake_slot.h"
#include "kforge/core/fs.h"
#include "kforge/core/subprocess.h"
#include "kforge/remote/rendezvous.h"
#include "kforge/results/store.h"

namespace kforge::remote {
namespace {

namespace fs = std::filesystem;
using kforge::testing::Child;
using testing::ErrorCode;
using testing::Get;
using testing::kToken;
using testing::Post;
using testing::WaitForInfo;

const fs::path kRoot(KFORGE_SOURCE_ROOT);

std::string Cassette() { return "replay:" + (kRoot / "examples/demo/cassette.jsonl").string(); }

class ProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = MakeTempDir("kforge-process");
    ASSERT_TRUE(d.ok());
    dir_ = *d;
    tokens_ = dir_ / "tokens";
    ASSERT_TRUE(WriteFileAtomic(tokens_, kToken + "\n").ok());
    MakeHoldingToolkit();
  }
  void TearDown() override {
    Release();  // lets any nvcc still waiting (of a killed server) finish
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // dir_/cuda: the real toolkit through symlinks, but bin/nvcc waits for
  // dir_/cuda/release whenever it is asked to compile (-o).
  void MakeHoldingToolkit() {
    const fs::path real = "/usr/local/cuda";
    const fs::path t = dir_ / "cuda";
    fs::create_directories(t / "bin");
    for (const auto& e : fs::directory_iterator(real)) {
      if (e.path().filename() != "bin") fs::create_symlink(e.path(), t / e.path().filename());
    }
    for (const auto& e : fs::directory_iterator(real / "bin")) {
      if (e.path().filename() != "nvcc")
        fs::create_symlink(e.path(), t / "bin" / e.path().filename());
    }
    const fs::path nvcc = t / "bin" / "nvcc";
    std::ofstream(nvcc) << "#!/bin/sh\n"
                        << "for a in \"$@\"; do\n"
                        << "  if [ \"$a\" = -o ]; then\n"
                        << "    while [ ! -e '" << (t / "release").string()
                        << "' ]; do\n"
                        // An orphan of a killed server ends with the test's directory.
                        << "      [ -d '" << t.string() << "' ] || exit 1\n"
                        << "      sleep 0.05\n"
                        << "    done\n"
                        << "    break\n"
                        << "  fi\n"
                        << "done\n"
                        << "exec " << (real / "bin" / "nvcc").string() << " \"$@\"\n";
    ::chmod(nvcc.c_str(), 0755);
    holding_toolkit_ = t;
  }
  void Release() { std::ofstream(holding_toolkit_ / "release") << "go\n"; }

  // Starts a server; returns its URL (read from its first line of output).
  std::string StartServer(Child& child, const std::string& name, bool holding, int compile_jobs,
                          const fs::path& register_file = {}) {
    std::vector<std::string> argv = {
        KFORGE_BIN,    "eval-server", "--tokens", tokens_.string(), "--listen",
        "127.0.0.1:0", "--gpus",      "none",     "--compile-jobs", std::to_string(compile_jobs)};
    if (!register_file.empty()) {
      argv.push_back("--register");
      argv.push_back(register_file.string());
    }
    std::map<std::string, std::string> env = {
        {"XDG_CACHE_HOME", (dir_ / ("cache-" + name)).string()},
        {"KFORGE_TASKS_DIR", (kRoot / "tasks").string()}};
    if (holding) env["CUDA_HOME"] = holding_toolkit_.string();
    EXPECT_TRUE(child.Start(argv, env, dir_ / (name + ".log")));
    auto line = child.ReadLine(std::chrono::seconds(60));
    EXPECT_TRUE(line) << "no output from the server; its log: "
                      << ReadFile(dir_ / (name + ".log")).value();
    if (!line) return "";
    const size_t at = line->find("http://");
    EXPECT_NE(at, std::string::npos) << *line;
    return line->substr(at, line->find(' ', at) - at);
  }

  // A compile-only job of a known-good kernel, for the suite the server has.
  std::string JobFor(const std::string& solution) {
    auto source = ReadFile(kRoot / "tasks/001_allreduce/solutions" / solution);
    EXPECT_TRUE(source.ok());
    return testing::JobBody(*source, true, "001_allreduce", suite_hash_);
  }

  void RunWhileAFails(const std::string& name, const std::function<void(Child&)>& upset,
                      const std::vector<std::string>& extra_args,
                      std::vector<std::string>* requeue_messages);

  fs::path dir_, tokens_, holding_toolkit_;
  std::string suite_hash_;
};

std::string FirstSolution() {
  for (const auto& e : fs::directory_iterator(kRoot / "tasks/001_allreduce/solutions")) {
    if (e.path().extension() == ".cu") return e.path().filename().string();
  }
  return "";
}

TEST_F(ProcessTest, TokensFileOthersCanReadIsRefused) {
  ::chmod(tokens_.c_str(), 0644);
  ProcessOptions o;
  o.timeout = std::chrono::minutes(1);
  auto r = RealProcessRunner().Run({KFORGE_BIN, "eval-server", "--tokens", tokens_.string(),
                                    "--listen", "127.0.0.1:0", "--gpus", "none"},
                                   o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 64) << r->err;
  EXPECT_NE(r->err.find("chmod 600"), std::string::npos) << r->err;
  EXPECT_EQ(r->err.find(kToken), std::string::npos);
  EXPECT_TRUE(r->out.empty()) << r->out;  // it never listened
}

TEST_F(ProcessTest, SigtermAnswersTheJobInFlightRefusesNewOnesAndExitsZero) {
  Child server;
  const fs::path reg = dir_ / "workers" / "a.json";
  const std::string url = StartServer(server, "a", /*holding=*/true, 1, reg);
  ASSERT_FALSE(url.empty());
  auto info = nlohmann::json::parse(Get(url, "/v1/info").body);
  suite_hash_ = info["task_suite_hash"];
  ASSERT_TRUE(fs::exists(reg));
  const std::string job = JobFor(FirstSolution());
  auto in_flight = std::async(std::launch::async, [&] { return Post(url, job); });
  ASSERT_TRUE(
      WaitForInfo(url, [](const nlohmann::json& j) { return j["queue"]["compile_running"] == 1; }));
  server.Signal(SIGTERM);
  ASSERT_TRUE(WaitForInfo(url, [](const nlohmann::json& j) { return j["draining"] == true; }));
  HttpReply late = Post(url, job);
  EXPECT_EQ(late.status, 503);
  EXPECT_EQ(ErrorCode(late), "draining");
  EXPECT_FALSE(fs::exists(reg));
  Release();
  HttpReply answer = in_flight.get();
  ASSERT_EQ(answer.status, 200) << answer.body;
  auto doc = nlohmann::json::parse(answer.body);
  EXPECT_EQ(doc["status"], "compiled") << doc.dump();
  EXPECT_EQ(doc["evaluated_by"]["pool"], "compile");
  const int status = server.Wait();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  auto log = ReadFile(dir_ / "a.log");
  EXPECT_NE(log->find("SIGTERM: draining"), std::string::npos) << *log;
  EXPECT_EQ(log->find(kToken), std::string::npos);  // never logged
}

// Every evaluation-bearing record of a run: (task, turn, evaluation status)
// per evaluation and (task, turn) per compiled event.
struct Record {
  std::multiset<std::string> evaluations, compiled;
  std::vector<nlohmann::json> requeued, abandoned;
  std::vector<std::string> stop_reasons;
  size_t turns = 0;
};

Record ReadRecord(const fs::path& run_dir) {
  Record rec;
  auto store = results::RunStore::Open(run_dir, true);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return rec;
  auto runs = (*store)->ListRuns();
  EXPECT_TRUE(runs.ok() && runs->size() == 1u);
  const int64_t run = runs->front().id;
  std::map<int64_t, std::string> task_of;
  auto sessions = (*store)->ListSessions(run);
  EXPECT_TRUE(sessions.ok());
  for (const auto& s : sessions.value()) {
    task_of[s.id] = s.key.task;
    rec.stop_reasons.push_back(s.stop_reason);
    auto turns = (*store)->ListTurns(s.id);
    rec.turns += turns->size();
    std::map<int64_t, int> index_of;
    for (const auto& t : turns.value()) index_of[t.id] = t.index;
    auto evaluations = (*store)->ListEvaluations(s.id);
    for (const auto& e : evaluations.value()) {
      rec.evaluations.insert(
          fmt::format("{} turn {} {}", s.key.task, index_of[e.turn_id], VerdictName(e.verdict)));
    }
  }
  auto events = (*store)->ListEvents(run);
  for (const auto& e : events.value()) {
    if (e.kind == "compiled")
      rec.compiled.insert(fmt::format("{} turn {}", task_of[e.detail["session"].get<int64_t>()],
                                      e.detail["turn"].get<int>()));
    if (e.kind == "eval_requeued") rec.requeued.push_back(e.detail);
    if (e.kind == "eval_abandoned") rec.abandoned.push_back(e.detail);
  }
  return rec;
}

// A run over two servers, a (holding its compiles) and b, whose first
// compile goes to a; `upset` is then done to a. The run must requeue that job
// on b within a minute and record every evaluation once, none of them a's.
// Returns a's URL and the requeued events' messages.
void ProcessTest::RunWhileAFails(const std::string& name, const std::function<void(Child&)>& upset,
                                 const std::vector<std::string>& extra_args,
                                 std::vector<std::string>* requeue_messages) {
  Child a, b;
  const std::string url_a = StartServer(a, "a", /*holding=*/true, 1);
  const std::string url_b = StartServer(b, "b", /*holding=*/false, 2);
  ASSERT_FALSE(url_a.empty());
  ASSERT_FALSE(url_b.empty());
  Child run;
  std::vector<std::string> argv = {KFORGE_BIN,
                                   "run",
                                   "--models",
                                   Cassette(),
                                   "--tasks",
                                   "1,2",
                                   "--compile-only",
                                   "--name",
                                   name,
                                   "--out",
                                   (dir_ / "runs").string(),
                                   "--evaluators",
                                   url_a + "," + url_b,
                                   "--eval-token-file",
                                   tokens_.string()};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  ASSERT_TRUE(run.Start(argv,
                        {{"XDG_CACHE_HOME", (dir_ / "cache-run").string()},
                         {"KFORGE_TASKS_DIR", (kRoot / "tasks").string()}},
                        dir_ / "run.log"));
  // The run's first compile goes to a (its first slot), which holds it.
  ASSERT_TRUE(WaitForInfo(url_a, [](const nlohmann::json& j) {
    return j["queue"]["compile_running"] == 1;
  })) << ReadFile(dir_ / "run.log").value();
  upset(a);
  // A minute is ample for noticing and for the four compiles on b.
  const std::optional<int> waited = run.WaitFor(std::chrono::minutes(1));
  const std::string log = ReadFile(dir_ / "run.log").value();
  ASSERT_TRUE(waited) << "the run did not finish within a minute; its log:\n" << log;
  const int status = *waited;
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 0) << log;
  EXPECT_NE(log.find("requeued"), std::string::npos) << log;

  Record rec = ReadRecord(dir_ / "runs" / name);
  // Both sessions ran their two turns, as a run where nothing happened to a
  // does: turn 1 a compile error (an evaluation), turn 2 compiled (an event).
  EXPECT_EQ(rec.turns, 4u);
  EXPECT_EQ(rec.evaluations, (std::multiset<std::string>{"001_allreduce turn 0 compile_error",
                                                         "002_allgather turn 0 compile_error"}));
  EXPECT_EQ(rec.compiled,
            (std::multiset<std::string>{"001_allreduce turn 1", "002_allgather turn 1"}));
  for (const auto& r : rec.stop_reasons) EXPECT_EQ(r, "evaluation needs a GPU");
  ASSERT_FALSE(rec.requeued.empty());
  for (const auto& e : rec.requeued) {
    EXPECT_NE(e["evaluator"].get<std::string>().find(url_a), std::string::npos) << e.dump();
    EXPECT_EQ(e["kind"], "slot_lost");
    requeue_messages->push_back(e.value("message", ""));
  }
  EXPECT_TRUE(rec.abandoned.empty());
  // The token went over the wire only: nothing under the run directory holds it.
  for (const auto& f : fs::recursive_directory_iterator(dir_ / "runs" / name)) {
    if (!f.is_regular_file()) continue;
    auto text = ReadFile(f.path());
    EXPECT_EQ(text->find(kToken), std::string::npos) << f.path();
  }
  // b did the work: it answered every evaluation the run recorded.
  auto info = nlohmann::json::parse(Get(url_b, "/v1/info").body);
  EXPECT_EQ(info["queue"]["answered"], 4);
  b.Signal(SIGTERM);
  EXPECT_EQ(WEXITSTATUS(b.Wait()), 0);
}

TEST_F(ProcessTest, SigkillMidJobRequeuesOnTheOtherServerAndLosesNothing) {
  std::vector<std::string> messages;
  // The run sees the cut connection at once (nothing of a's holds it open).
  RunWhileAFails(
      "killed",
      [](Child& a) {
        a.Signal(SIGKILL);
        a.Wait();
      },
      {}, &messages);
}

// A stopped server keeps the job's connection open and answers nothing: the
// run's health checks give the job up and requeue it. (3 s: b, busy with
// the requeued compiles on a loaded machine, must not miss a window.)
TEST_F(ProcessTest, SigstopMidJobRequeuesOnTheOtherServer) {
  std::vector<std::string> messages;
  RunWhileAFails(
      "stopped", [](Child& a) { a.Signal(SIGSTOP); }, {"--evaluator-liveness", "3"}, &messages);
  ASSERT_FALSE(messages.empty());
  EXPECT_NE(messages.front().find("no answer to its health checks for 3 s"), std::string::npos)
      << messages.front();
}

TEST_F(ProcessTest, RunRefusesAWrongTokenBeforeStoringAnything) {
  Child a;
  const std::string url = StartServer(a, "a", /*holding=*/false, 1);
  ASSERT_FALSE(url.empty());
  const fs::path wrong = dir_ / "wrong";
  ASSERT_TRUE(WriteFileAtomic(wrong, "wrong-token-0123456789abcdef\n").ok());
  ProcessOptions o;
  o.timeout = std::chrono::minutes(1);
  o.env = {{"KFORGE_TASKS_DIR", (kRoot / "tasks").string()}};
  auto r = RealProcessRunner().Run(
      {KFORGE_BIN, "run", "--models", Cassette(), "--tasks", "1", "--compile-only", "--name",
       "denied", "--out", (dir_ / "runs").string(), "--evaluators", url, "--eval-token-file",
       wrong.string()},
      o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 64) << r->err;
  EXPECT_NE(r->err.find("refused the token"), std::string::npos) << r->err;
  EXPECT_FALSE(fs::exists(dir_ / "runs" / "denied"));
  a.Signal(SIGTERM);
  EXPECT_EQ(WEXITSTATUS(a.Wait()), 0);
}

}  // namespace
}  // namespace kforge::remote
