// `kforge eval-server`: evaluations for other machines (docs/scale.md).
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "command.h"
#include "exit_codes.h"
#include "kforge/core/log.h"
#include "kforge/core/strings.h"
#include "kforge/evaluator/hardware.h"
#include "kforge/evaluator/service.h"
#include "kforge/evaluator/slots.h"
#include "kforge/evaluator/suite_hash.h"
#include "kforge/evaluator/task.h"
#include "kforge/evaluator/task_select.h"
#include "kforge/remote/server.h"
#include "kforge/remote/tokens.h"

namespace kforge::cli {
namespace {

namespace fs = std::filesystem;

struct ServerArgs {
  std::string listen = "127.0.0.1:8780";
  std::string tokens, gpus, gpu_sets, register_file, advertise, tasks_dir;
  int world = 2;
  int compile_jobs = 0;
  double baseline_reuse_s = eval::kDefaultBaselineReuseS;
  bool no_warm_groups = false;
  int max_queue = 64;
  int per_token = 16;
  int64_t max_upload = 4 << 20;
};

// "HOST:PORT", "[V6]:PORT" or ":PORT" (every address).
Status ParseListen(const std::string& text, std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos)
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("--listen {}: expected HOST:PORT (e.g. 0.0.0.0:8780, :0)", text));
  std::string h = text.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string p = text.substr(colon + 1);
  const bool digits = !p.empty() && p.size() <= 5 &&
                      std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || std::stoi(p) > 65535)
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("--listen {}: the port must be 0..65535 (0: any free port)", text));
  *host = h.empty() ? "0.0.0.0" : h;
  *port = std::stoi(p);
  return Status::Ok();
}

Result<std::vector<int>> ParseIndices(const std::string& text, const char* flag) {
  std::vector<int> out;
  for (const std::string& part : Split(text, ',')) {
    const bool digits =
        !part.empty() && part.size() <= 4 &&
        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits)
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("{} {}: '{}' is not a GPU index", flag, text, part));
    out.push_back(std::stoi(part));
  }
  return out;
}

// The GPU sets: --gpu-sets as given; else the GPUs (--gpus, or every one the
// probe found) cut into sets of `world` as `kforge run` cuts them
// (eval::CutGpuSets).
Result<std::vector<std::vector<int>>> GpuSets(const ServerArgs& a,
                                              std::optional<eval::HardwareCard>* card) {
  std::vector<std::vector<int>> sets;
  if (a.gpus == "none") return sets;
  std::vector<int> gpus;
  if (!a.gpu_sets.empty()) {
    for (const std::string& s : Split(a.gpu_sets, ':')) {
      KF_ASSIGN_OR_RETURN(std::vector<int> set, ParseIndices(s, "--gpu-sets"));
      if (static_cast<int>(set.size()) > a.world)
        return Error(ErrorKind::kInvalidInput,
                     fmt::format("--gpu-sets {}: set '{}' has {} GPUs, more than --world {}",
                                 a.gpu_sets, s, set.size(), a.world));
      for (int g : set) gpus.push_back(g);
      sets.push_back(set);
    }
  } else if (!a.gpus.empty()) {
    KF_ASSIGN_OR_RETURN(gpus, ParseIndices(a.gpus, "--gpus"));
  }
  auto probed = eval::ProbeHardware(gpus);
  if (!probed.ok()) {
    std::fprintf(stderr, "kforge eval-server: no GPU (%s): serving compile-only jobs only\n",
                 probed.status().message().c_str());
    return std::vector<std::vector<int>>{};
  }
  *card = *probed;
  if (!sets.empty()) return sets;
  if (gpus.empty()) gpus = probed->DeviceIndices();
  return eval::CutGpuSets(gpus, a.world);
}

int RunServer(const ServerArgs& a) {
  remote::EvalServerOptions o;
  if (Status st = ParseListen(a.listen, &o.host, &o.port); !st.ok())
    return FailWith("eval-server", st);
  // The tokens first: a server that cannot authenticate must not start.
  auto tokens = remote::TokenSet::Load(a.tokens);
  if (!tokens.ok()) return FailWith("eval-server", tokens.status());
  const fs::path tasks_dir = eval::TasksDir(a.tasks_dir);
  auto tasks = eval::LoadCheckedTasks(tasks_dir);
  if (!tasks.ok()) return FailWith("eval-server", tasks.status());
  auto hash = eval::TaskSuiteHash(tasks_dir);
  if (!hash.ok()) return FailWith("eval-server", hash.status());
  std::optional<eval::HardwareCard> card;
  auto sets = GpuSets(a, &card);
  if (!sets.ok()) return FailWith("eval-server", sets.status());
  o.gpu_sets = *sets;
  o.world = a.world;
  const eval::CpuSplit cpus = eval::SplitCpus(a.world, static_cast<int>(o.gpu_sets.size()));
  o.gpu_cpus = cpus.gpu;
  o.compile_cpus = cpus.compile;
  o.compile_slots = a.compile_jobs > 0 ? a.compile_jobs : cpus.compile_slots;
  o.max_queue = static_cast<size_t>(a.max_queue);
  o.per_token = a.per_token;
  o.max_upload_bytes = static_cast<size_t>(a.max_upload);
  o.task_suite_hash = *hash;
  o.tasks_dir = tasks_dir.string();
  for (const auto& t : *tasks) o.task_keys.insert(t.key);
  o.hardware = card ? eval::ToJson(*card) : nlohmann::json();
  o.register_file = a.register_file;
  o.advertise_host = a.advertise;

  // SIGTERM and SIGINT are taken by one thread (sigwait), which starts the
  // drain; every other thread, evaluators' included, inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const std::vector<eval::Task>* task_list = &*tasks;
  const double reuse = a.baseline_reuse_s;
  const bool warm = !a.no_warm_groups;
  auto server =
      remote::EvalServer::Start(o, std::move(*tokens), [task_list, reuse, warm](const auto& gpus) {
        return eval::MakeLocalEvalService(task_list, gpus, reuse, warm);
      });
  if (!server.ok()) return FailWith("eval-server", server.status());
  remote::EvalServer* s = server->get();
  std::thread([stop_signals, s] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    LogInfo("eval-server", "{}: draining (running and queued jobs finish; new ones are refused)",
            sig == SIGTERM ? "SIGTERM" : "SIGINT");
    s->RequestDrain();
  }).detach();
  if (o.host != "127.0.0.1" && o.host != "::1" && o.host != "localhost") {
    std::fprintf(stderr,
                 "kforge eval-server: listening on %s: use a firewall or a TLS reverse proxy "
                 "(docs/scale.md); tokens travel in clear over plain HTTP\n",
                 o.host.c_str());
  }
  std::printf(
      "kforge eval-server: listening on %s (%zu GPU slot(s) of W=%d, %d compile "
      "slot(s), task suite %s)\n",
      s->url().c_str(), o.gpu_sets.size(), o.world, o.compile_slots,
      o.task_suite_hash.substr(0, 12).c_str());
  std::fflush(stdout);
  Status st = s->Run();
  if (!st.ok()) return FailWith("eval-server", st);
  return kExitOk;
}

void AddEvalServer(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<ServerArgs>();
  CLI::App* cmd =
      app.add_subcommand("eval-server", "evaluate kernels for other machines over HTTP");
  cmd->add_option("--listen", a->listen, "HOST:PORT to listen on (PORT 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--tokens", a->tokens, "file of accepted bearer tokens, one a line (mode 0600)")
      ->required();
  cmd->add_option("--gpus", a->gpus, "GPUs to serve, e.g. 0,1,2,3, or none (default: all)");
  cmd->add_option("--gpu-sets", a->gpu_sets,
                  "explicit GPU sets, e.g. 0,1:2,3 (one evaluation at a time each)");
  cmd->add_option("--world", a->world, "ranks per evaluation (the GPU sets' size)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--compile-jobs", a->compile_jobs,
                  "compile-only evaluations at once (default: the CPU cores the GPU slots leave)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--baseline-reuse", a->baseline_reuse_s,
                  "seconds a GPU slot reuses a baseline it timed, confirmed each time (0: never)")
      ->check(NonNegative())
      ->capture_default_str();
  cmd->add_flag("--no-warm-groups", a->no_warm_groups,
                "start each evaluation's served groups when it needs them, instead of after the "
                "previous evaluation of the same shape (docs/methodology.md)");
  cmd->add_option("--max-queue", a->max_queue, "jobs that may wait for a slot")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  cmd->add_option("--per-token", a->per_token, "jobs queued or running per token (0: no cap)")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  cmd->add_option("--max-upload", a->max_upload, "largest request body in bytes")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--register", a->register_file,
                  "write a rendezvous file (url, slots, host, pid) here when ready");
  cmd->add_option("--advertise", a->advertise,
                  "host name others reach this server by (default: the --listen host, or this "
                  "machine's name)");
  cmd->add_option("--tasks-dir", a->tasks_dir, "where tasks live");
  cmd->callback([a, &exit_code] { exit_code = RunServer(*a); });
}

KF_COMMAND("eval-server", AddEvalServer);

}  // namespace
}  // namespace kforge::cli
