#include <unistd.h>

#include <cstdlib>

#include "kforge/core/fs.h"
#include "kforge/core/log.h"
#include "kforge/core/subprocess.h"
#include "run/worker_group.h"
#include "sandbox/sandbox.h"

namespace kforge::eval {

std::unique_ptr<MpsDaemon> MpsDaemon::StartIfAvailable() {
  const char* want = std::getenv("KFORGE_MPS");
  if (want && std::string(want) == "0") return nullptr;
  auto control = FindInPath("nvidia-cuda-mps-control");
  if (control.empty()) return nullptr;
  auto dir = MakeTempDir("kforge-mps");
  if (!dir.ok()) return nullptr;
  auto d = std::unique_ptr<MpsDaemon>(new MpsDaemon());
  d->dir_ = *dir;
  (void)MakeDirs(d->dir_ / "pipe");
  (void)MakeDirs(d->dir_ / "log");
  ProcessOptions opts;
  opts.timeout = std::chrono::seconds(20);
  opts.env = MpsDaemonEnvironment(d->Env());
  opts.inherit_env = false;
  auto r = RealProcessRunner().Run({control.string(), "-d"}, opts);
  if (!r.ok() || !r->Succeeded()) {
    LogWarn("evaluator", "could not start MPS ({}); ranks sharing a GPU will time-slice",
            r.ok() ? r->err : r.status().message());
    std::filesystem::remove_all(d->dir_);
    return nullptr;
  }
  LogInfo("evaluator", "started a private MPS daemon in {}", d->dir_.string());
  return d;
}

MpsDaemon::~MpsDaemon() {
  auto control = FindInPath("nvidia-cuda-mps-control");
  if (!control.empty()) {
    ProcessOptions opts;
    opts.timeout = std::chrono::seconds(20);
    opts.env = Env();
    (void)RealProcessRunner().Run({"sh", "-c", "echo quit | \"$0\"", control.string()}, opts);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::map<std::string, std::string> MpsDaemonEnvironment(
    const std::map<std::string, std::string>& mps_env) {
  std::map<std::string, std::string> env;
  for (auto& [name, value] : sandbox::ThisEnvironment()) {
    if (sandbox::LooksSecret(name) || name.find("CANARY") != std::string::npos) continue;
    env[name] = std::move(value);
  }
  for (const auto& [k, v] : mps_env) env[k] = v;
  return env;
}

std::map<std::string, std::string> MpsDaemon::Env() const {
  // No L2 set-aside for persisting accesses, whatever the operator's
  // environment says: under MPS a client cannot change it (cudaDeviceSetLimit
  // is refused), so a candidate's access-policy windows then persist nothing
  // that could squeeze the baseline timed after it (docs/integrity.md).
  return {{"CUDA_MPS_PIPE_DIRECTORY", (dir_ / "pipe").string()},
          {"CUDA_MPS_LOG_DIRECTORY", (dir_ / "log").string()},
          {"CUDA_DEVICE_DEFAULT_PERSISTING_L2_CACHE_PERCENTAGE_LIMIT", "0"}};
}

}  // namespace kforge::eval
