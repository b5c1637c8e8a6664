// What an untrusted process may see of the environment.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "sandbox/sandbox.h"

extern char** environ;

namespace kforge::sandbox {
namespace {

// Variables the CUDA runtime, NCCL, the MPS client and the loader read.
bool Kept(std::string_view name, bool keep_path) {
  static constexpr std::string_view kExact[] = {"LD_LIBRARY_PATH",
                                                "CUDA_VISIBLE_DEVICES",
                                                "CUDA_DEVICE_ORDER",
                                                "CUDA_MPS_PIPE_DIRECTORY",
                                                "CUDA_MPS_LOG_DIRECTORY",
                                                "LANG",
                                                "LC_ALL"};
  static constexpr std::string_view kPrefix[] = {"NCCL_", "KFORGE_WORKER_", "KFORGE_SANDBOX_"};
  if (keep_path && name == "PATH") return true;
  for (auto e : kExact) {
    if (name == e) return true;
  }
  for (auto p : kPrefix) {
    if (name.substr(0, p.size()) == p) return true;
  }
  return false;
}

std::string Upper(std::string_view s) {
  std::string u(s);
  for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return u;
}

}  // namespace

bool LooksSecret(const std::string& name) {
  const std::string u = Upper(name);
  for (std::string_view w : {"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH",
                             "COOKIE", "SESSION"}) {
    if (u.find(w) != std::string::npos) return true;
  }
  return false;
}

std::map<std::string, std::string> ThisEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

std::vector<std::string> ScrubbedEnvironment(const std::map<std::string, std::string>& extra,
                                             bool keep_path) {
  std::map<std::string, std::string> env;
  for (auto& [name, value] : ThisEnvironment()) {
    if (Kept(name, keep_path) && !LooksSecret(name)) env[name] = std::move(value);
  }
  for (const auto& [k, v] : extra) {
    if (!LooksSecret(k)) env[k] = v;
  }
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace kforge::sandbox
