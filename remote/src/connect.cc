#include "kforge/remote/connect.h"

#include <fmt/format.h>

#include <algorithm>

#include "kforge/remote/rendezvous.h"
#include "wire.h"

namespace kforge::remote {

std::vector<Endpoint> EndpointsIn(const std::filesystem::path& dir) {
  std::vector<Endpoint> out;
  for (const Registration& r : ReadRegistrations(dir)) out.push_back({r.url, r.origin});
  return out;
}

Result<RemoteSlots> ConnectEvaluators(const std::vector<Endpoint>& endpoints,
                                      const ConnectOptions& o) {
  if (endpoints.empty()) return Error(ErrorKind::kInvalidInput, "no evaluation servers given");
  RemoteSlots slots;
  for (const Endpoint& e : endpoints) {
    KF_ASSIGN_OR_RETURN(ServerInfo info, FetchServerInfo(e.url, o.token, o.info_timeout_s));
    if (info.task_suite_hash != o.task_suite_hash) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("evaluation server {} has another task suite ({}; this run's is "
                               "{}): give both machines the same tasks folder",
                               e.url, info.task_suite_hash, o.task_suite_hash));
    }
    if (info.kforge_version != kforge::Version()) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("evaluation server {} is kforge {}; this is kforge {}", e.url,
                               info.kforge_version, kforge::Version()));
    }
    if (o.need_gpu && info.gpu_slots > 0 && info.world != o.world) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("evaluation server {} holds GPU sets for W={}; this run is W={} "
                               "(start it with --world {})",
                               e.url, info.world, o.world, o.world));
    }
    slots.servers.push_back(std::move(info));
  }
  int most_gpu = 0, most_compile = 0;
  for (const auto& s : slots.servers) {
    most_gpu = std::max(most_gpu, s.gpu_slots);
    most_compile = std::max(most_compile, s.compile_slots);
  }
  auto port = [&](size_t server, const char* pool, int slot) {
    const Endpoint& e = endpoints[server];
    RemotePortOptions p;
    p.url = e.url;
    p.registration = e.registration;
    p.token = o.token;
    p.task_suite_hash = o.task_suite_hash;
    p.timeout_s = o.job_timeout_s;
    p.liveness_s = o.liveness_s;
    p.label = fmt::format("{} ({} slot {})", e.url, pool, slot);
    return MakeRemoteEvalService(std::move(p));
  };
  for (int k = 0; k < most_gpu && o.need_gpu; ++k) {
    for (size_t s = 0; s < slots.servers.size(); ++s) {
      if (k < slots.servers[s].gpu_slots) {
        slots.gpu.push_back(port(s, "gpu", k));
        slots.gpu_names.push_back(fmt::format("{} (gpu slot {})", endpoints[s].url, k));
        slots.gpu_groups.push_back(endpoints[s].url);
      }
    }
  }
  for (int k = 0; k < most_compile; ++k) {
    for (size_t s = 0; s < slots.servers.size(); ++s) {
      if (k < slots.servers[s].compile_slots) {
        slots.compile.push_back(port(s, "compile", k));
        slots.compile_names.push_back(fmt::format("{} (compile slot {})", endpoints[s].url, k));
        slots.compile_groups.push_back(endpoints[s].url);
      }
    }
  }
  for (const auto& s : slots.servers) {
    if (s.gpu_slots > 0 && !s.hardware.is_null()) {
      slots.hardware = s.hardware;
      break;
    }
  }
  if (slots.compile.empty())
    return Error(ErrorKind::kInvalidInput,
                 "the evaluation servers have no compile slots (start one with --compile-jobs)");
  return slots;
}

}  // namespace kforge::remote
