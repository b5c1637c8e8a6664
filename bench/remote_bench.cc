// What remote evaluation costs, and the numbers the throughput model in
// docs/scale.md is built from, measured on this machine:
//
//   1. the eval-server's own overhead per job on loopback (a slot that
//      answers at once): one client, and 16 at a time;
//   2. a compile-only evaluation, compile cache warm, through the real
//      evaluator locally and through an eval-server on loopback, alternated;
//   3. a cold compile (nvcc) of the same kernel, for scale;
//   4. the run store's durable writes (one evaluation each);
//   5. the coordinator's own cost per evaluation: a run of 1000 GPU slots on
//      fake time, with instant fake model, evaluators and store.
//
//   remote_bench [--iterations N] [--kernel FILE] [--task KEY] [--gpu]
//
// --gpu (on a GPU machine): item 2 runs real evaluations on GPU 0 (W=2,
// default check and bench sizes) instead of compile-only ones, locally and
// through an eval-server whose one slot is GPU 0, alternated; items 1, 4 and
// 5 are skipped (they do not depend on the GPU).
//
// Prints a markdown table (bench/results/*-remote-overhead.md).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kforge/agent/adapters.h"
#include "kforge/agent/runner.h"
#include "kforge/agent/strategy.h"
#include "kforge/core/eval_doc.h"
#include "kforge/core/fs.h"
#include "kforge/evaluator/suite_hash.h"
#include "kforge/evaluator/task.h"
#include "kforge/remote/client.h"
#include "kforge/remote/server.h"
#include "kforge/results/store.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using kforge::eval::EvalRequest;
using kforge::eval::EvalService;

const std::string kToken = "bench-token-0123456789abcdef";

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Stats {
  double median = 0, p10 = 0, p90 = 0;
};

Stats Summary(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return {};
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]; };
  return {at(0.5), at(0.1), at(0.9)};
}

class Instant final : public EvalService {
 public:
  kforge::Result<nlohmann::json> Evaluate(const EvalRequest& job) override {
    return nlohmann::json{{"schema", kforge::kEvalSchema},
                          {"status", kforge::VerdictName(kforge::Verdict::kCompiled)},
                          {"task", job.task}};
  }
};

// An eval-server on loopback over `factory`, serving until destroyed.
struct Loopback {
  Loopback(kforge::remote::EvaluatorFactory factory, const std::string& suite,
           std::set<std::string> keys, int compile_slots,
           std::vector<std::vector<int>> gpu_sets = {}, int world = 0) {
    kforge::remote::EvalServerOptions o;
    o.compile_slots = compile_slots;
    o.gpu_sets = std::move(gpu_sets);
    o.world = world;
    o.max_queue = 64;
    o.per_token = 0;
    o.task_suite_hash = suite;
    o.task_keys = std::move(keys);
    auto tokens = kforge::remote::TokenSet::FromTokens({kToken});
    auto started = kforge::remote::EvalServer::Start(o, std::move(*tokens), factory);
    if (!started.ok()) {
      std::fprintf(stderr, "%s\n", started.status().ToString().c_str());
      std::exit(1);
    }
    server = std::move(started).value();
    thread = std::thread([this] { (void)server->Run(); });
  }
  ~Loopback() {
    server->RequestDrain();
    thread.join();
  }
  std::unique_ptr<EvalService> Port(const std::string& suite) {
    kforge::remote::RemotePortOptions p;
    p.url = server->url();
    p.token = kToken;
    p.task_suite_hash = suite;
    return kforge::remote::MakeRemoteEvalService(p);
  }
  std::unique_ptr<kforge::remote::EvalServer> server;
  std::thread thread;
};

template <typename F>
std::vector<double> Time(int n, F f) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    f(i);
    out.push_back(Seconds(t0, Clock::now()));
  }
  return out;
}

void Row(const char* what, const Stats& s, double scale, const char* unit, const char* note) {
  std::printf("| %s | %.3g | %.3g | %.3g | %s | %s |\n", what, s.median * scale, s.p10 * scale,
              s.p90 * scale, unit, note);
}

// 5. The run engine alone: 1000 GPU slots, instant everything, fake time.
class InstantLlm final : public kforge::agent::LlmPort {
 public:
  kforge::Result<kforge::agent::LlmAnswer> Complete(const kforge::agent::LlmCall&) override {
    kforge::agent::LlmAnswer a;
    a.text =
        "```cuda\n#include \"kforge/kernel.h\"\nextern \"C\" int kf_run(kf_ctx*) { return 0; "
        "}\n```\n";
    a.latency_s = 30;
    return a;
  }
  // Unpriced and tiny: the bench measures the evaluator path, never a budget.
  kforge::agent::LlmQuote Quote(const kforge::agent::LlmCall&) override { return {}; }
};

class SlowEnough final : public EvalService {
 public:
  kforge::Result<nlohmann::json> Evaluate(const EvalRequest& job) override {
    return nlohmann::json{{"schema", kforge::kEvalSchema},
                          {"status", kforge::VerdictName(kforge::Verdict::kPassed)},
                          {"speedup", 1.1},
                          {"seconds", job.compile_only ? 2.0 : 10.0}};
  }
};

class NullStore final : public kforge::agent::StorePort {
 public:
  kforge::Result<kforge::agent::RunInfo> CreateOrGetRun(const std::string&, const nlohmann::json& c,
                                                        const std::string&,
                                                        const nlohmann::json&) override {
    kforge::agent::RunInfo run;
    run.id = 1;
    run.config = c;
    return run;
  }
  kforge::Status FinishRun(int64_t, const std::string&) override { return kforge::Status::Ok(); }
  kforge::Status SetRunConfig(int64_t, const nlohmann::json&) override {
    return kforge::Status::Ok();
  }
  kforge::Result<int64_t> UpsertSession(int64_t, const kforge::agent::SessionKey&) override {
    return ++id_;
  }
  kforge::Result<std::vector<kforge::agent::SessionRecord>> ListSessions(int64_t) override {
    return std::vector<kforge::agent::SessionRecord>{};
  }
  kforge::Status SetSessionState(int64_t, const std::string&, const std::string&) override {
    return kforge::Status::Ok();
  }
  kforge::Result<int64_t> AppendTurn(const kforge::agent::TurnRecord&) override { return ++id_; }
  kforge::Status SetTurnFeedback(int64_t, const std::string&) override {
    return kforge::Status::Ok();
  }
  kforge::Result<std::vector<kforge::agent::TurnRecord>> ListTurns(int64_t) override {
    return std::vector<kforge::agent::TurnRecord>{};
  }
  kforge::Result<int64_t> RecordEvaluation(int64_t, int64_t, const nlohmann::json&) override {
    ++evaluations;
    return ++id_;
  }
  kforge::Result<std::vector<kforge::agent::EvaluationRecord>> ListEvaluations(int64_t) override {
    return std::vector<kforge::agent::EvaluationRecord>{};
  }
  kforge::Status SetBestEvaluation(int64_t, int64_t) override { return kforge::Status::Ok(); }
  kforge::Status AppendEvent(int64_t, const std::string&, const nlohmann::json&) override {
    return kforge::Status::Ok();
  }
  int64_t evaluations = 0;

 private:
  int64_t id_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int iterations = 20;
  bool gpu = false;
  std::string task_key = "001_allreduce";
  fs::path root(KFORGE_SOURCE_ROOT);
  fs::path kernel = root / "examples/demo/kernels/allreduce_naive.cu";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--gpu") {
      gpu = true;
      continue;
    }
    if (i + 1 >= argc) break;
    ++i;
    if (a == "--iterations") iterations = std::max(3, std::atoi(argv[i]));
    if (a == "--kernel") kernel = argv[i];
    if (a == "--task") task_key = argv[i];
  }
  // The worker is not beside this binary: name the one built with it.
  ::setenv("KFORGE_WORKER", KFORGE_WORKER_PATH, 0);
  auto tasks = kforge::eval::LoadTasks(root / "tasks");
  if (!tasks.ok()) {
    std::fprintf(stderr, "%s\n", tasks.status().ToString().c_str());
    return 1;
  }
  const std::string suite = *kforge::eval::TaskSuiteHash(root / "tasks");
  std::set<std::string> keys;
  for (const auto& t : *tasks) keys.insert(t.key);
  const std::string source = *kforge::ReadFile(kernel);
  const EvalRequest job{task_key, source, "k.cu", 2, "", !gpu};

  std::printf("| what | median | p10 | p90 | unit | note |\n|---|---|---|---|---|---|\n");

  // 1. Server overhead alone.
  if (!gpu) {
    Loopback lb([](const std::vector<int>&) { return std::make_unique<Instant>(); }, suite, keys,
                4);
    auto port = lb.Port(suite);
    (void)port->Evaluate(job);
    Row("eval-server round trip, instant slot, 1 client",
        Summary(Time(iterations * 10, [&](int) { (void)port->Evaluate(job); })), 1e3, "ms",
        "HTTP + JSON + queue on loopback; the kernel source is sent each time");
    const int clients = 16, each = iterations * 5;
    auto t0 = Clock::now();
    std::vector<std::future<void>> f;
    for (int c = 0; c < clients; ++c) {
      f.push_back(std::async(std::launch::async, [&] {
        auto p = lb.Port(suite);
        for (int i = 0; i < each; ++i) (void)p->Evaluate(job);
      }));
    }
    for (auto& x : f) x.get();
    const double s = Seconds(t0, Clock::now());
    std::printf(
        "| eval-server throughput, instant slots, 16 clients | %.0f | - | - | jobs/s | %d "
        "jobs, 4 slots, on %u cores |\n",
        clients * each / s, clients * each, std::thread::hardware_concurrency());
  }

  // 2. and 3. The real evaluator, cache warm: local vs remote. Compile-only,
  // or (--gpu) real evaluations on GPU 0.
  {
    auto cache = kforge::MakeTempDir("kforge-remote-bench");
    ::setenv("XDG_CACHE_HOME", cache->c_str(), 1);
    const std::vector<int> set = gpu ? std::vector<int>{0} : std::vector<int>{};
    auto local = kforge::eval::MakeLocalEvalService(&*tasks, set);
    auto t0 = Clock::now();
    auto first = local->Evaluate(job);
    const double cold = Seconds(t0, Clock::now());
    if (!first.ok()) {
      std::fprintf(stderr, "%s\n", first.status().ToString().c_str());
      return 1;
    }
    const std::string expect(
        kforge::VerdictName(gpu ? kforge::Verdict::kPassed : kforge::Verdict::kCompiled));
    if (first->value("status", "") != expect) {
      std::fprintf(stderr, "the first evaluation is %s, not %s: %s\n",
                   first->value("status", "?").c_str(), expect.c_str(),
                   first->value("message", "").c_str());
      return 1;
    }
    const std::vector<kforge::eval::Task>* list = &*tasks;
    Loopback lb(
        [list](const std::vector<int>& g) { return kforge::eval::MakeLocalEvalService(list, g); },
        suite, keys, 1, gpu ? std::vector<std::vector<int>>{set} : std::vector<std::vector<int>>{},
        gpu ? 2 : 0);
    auto remote = lb.Port(suite);
    (void)remote->Evaluate(job);  // the server's evaluator learns the toolchain once
    // Every answer must be the same verdict; a failed one would time nothing.
    auto checked = [&](EvalService& port) {
      auto a = Clock::now();
      auto doc = port.Evaluate(job);
      const double s = Seconds(a, Clock::now());
      if (!doc.ok() || doc->value("status", "") != expect) {
        std::fprintf(
            stderr, "an evaluation came back %s\n",
            doc.ok() ? doc->value("status", "?").c_str() : doc.status().ToString().c_str());
        std::exit(1);
      }
      return s;
    };
    std::vector<double> l, r;
    for (int i = 0; i < iterations; ++i) {
      l.push_back(checked(*local));
      r.push_back(checked(*remote));
    }
    Stats sl = Summary(l), sr = Summary(r);
    const char* kind = gpu ? "GPU evaluation (W=2, GPU 0)" : "compile-only evaluation";
    Row(fmt::format("{}, cache warm, local", kind).c_str(), sl, 1e3, "ms",
        "reference + kernel cached");
    Row(fmt::format("{}, cache warm, eval-server", kind).c_str(), sr, 1e3, "ms",
        "same, on loopback");
    std::printf(
        "| eval-server overhead per evaluation | %.3g | - | - | ms | remote median - local "
        "median (%.1f%%) |\n",
        (sr.median - sl.median) * 1e3, 100 * (sr.median - sl.median) / sl.median);
    std::printf("| cold %s (nvcc) | %.3g | - | - | s | one run, %s |\n", kind, cold,
                kernel.filename().string().c_str());
    fs::remove_all(*cache);
  }
  if (gpu) return 0;

  // 4. The run store: durable evaluation writes.
  {
    auto dir = kforge::MakeTempDir("kforge-store-bench");
    auto store = kforge::results::RunStore::Open(*dir, false);
    auto run = (*store)->CreateOrGetRun("bench", nlohmann::json::object(), "0.1.0", "", {});
    kforge::results::SessionKey key{"m", "001_allreduce", "refine", 0, 2, "f32", "collective"};
    auto session = (*store)->UpsertSession(run->id, key);
    kforge::results::TurnRecord turn;
    turn.session_id = *session;
    auto turn_id = (*store)->AppendTurn(turn);
    nlohmann::json eval = {{"schema", kforge::kEvalSchema},
                           {"status", kforge::VerdictName(kforge::Verdict::kPassed)},
                           {"speedup", 1.2},
                           {"message", std::string(400, 'm')},
                           {"timing", nlohmann::json::array()}};
    for (int i = 0; i < 8; ++i)
      eval["timing"].push_back(
          {{"size", "1MiB"}, {"speedup", 1.2}, {"pad", std::string(300, 'p')}});
    Row("run store: one durable evaluation write",
        Summary(Time(iterations * 10,
                     [&](int) { (void)(*store)->RecordEvaluation(*session, *turn_id, eval); })),
        1e3, "ms", "SQLite, committed before return; a ~3.5 KB document");
    fs::remove_all(*dir);
  }

  // 5. The coordinator: 1000 GPU slots on fake time.
  {
    auto strategy = kforge::agent::ParseStrategy("turns = 4\nsamples = 4\n", "bench.toml",
                                                 root / "prompts/templates");
    kforge::agent::RunSpec spec;
    spec.name = "bench";
    for (int m = 0; m < 5; ++m) spec.models.push_back("m" + std::to_string(m));
    for (int t = 0; t < 40; ++t)
      spec.tasks.push_back({"t" + std::to_string(t), "collective", {"SYS", "PROMPT"}});
    spec.strategy = &*strategy;
    spec.repeats = 3;
    spec.pools.gpu_sets = 1000;
    spec.pools.compile_slots = 1000;
    spec.pools.llm_per_model = 200;
    spec.pools.llm_total = 1000;
    InstantLlm llm;
    SlowEnough eval;
    NullStore store;
    kforge::FakeClock clock;
    auto executor = kforge::agent::MakeSimExecutor(clock);
    kforge::agent::RunDeps deps;
    deps.llm = &llm;
    deps.gpu_sets.assign(1000, &eval);
    deps.compilers.assign(1000, &eval);
    deps.store = &store;
    deps.clock = &clock;
    deps.executor = executor.get();
    auto t0 = Clock::now();
    auto summary = kforge::agent::ExecuteRun(spec, deps);
    const double s = Seconds(t0, Clock::now());
    if (!summary.ok()) {
      std::fprintf(stderr, "%s\n", summary.status().ToString().c_str());
      return 1;
    }
    std::printf(
        "| coordinator CPU per evaluation (1000 GPU slots, 600 sessions) | %.3g | - | - | "
        "ms | %lld evaluations in %.2f s of CPU, fake model/evaluators/store |\n",
        1e3 * s / static_cast<double>(store.evaluations), static_cast<long long>(store.evaluations),
        s);
  }
  return 0;
}
