#include <fmt/format.h>

#include "sandbox/sandbox.h"

namespace kforge::sandbox {

const std::vector<std::string>& CandidateLayers() {
  static const std::vector<std::string> kLayers = {
      "environment", "descriptors", "network", "privileges", "limits", "landlock", "seccomp"};
  return kLayers;
}

void Report::Add(std::string name, bool applied, std::string detail) {
  layers.push_back({std::move(name), applied, std::move(detail)});
}

bool Report::Complete() const { return Missing().empty(); }

std::vector<std::string> Report::Missing() const {
  std::vector<std::string> missing;
  for (const std::string& want : CandidateLayers()) {
    bool found = false;
    for (const Layer& l : layers) found |= (l.name == want && l.applied);
    if (!found) missing.push_back(want);
  }
  return missing;
}

nlohmann::json Report::ToJson() const {
  nlohmann::json ls = nlohmann::json::array();
  for (const Layer& l : layers) {
    ls.push_back({{"name", l.name}, {"applied", l.applied}, {"detail", l.detail}});
  }
  return {{"complete", Complete()}, {"missing", Missing()}, {"layers", ls}};
}

Report Report::FromJson(const nlohmann::json& j) {
  Report r;
  if (!j.is_object() || !j.contains("layers") || !j["layers"].is_array()) return r;
  for (const auto& l : j["layers"]) {
    if (!l.is_object()) continue;
    auto name = l.find("name");
    auto applied = l.find("applied");
    auto detail = l.find("detail");
    if (name == l.end() || !name->is_string() || applied == l.end() || !applied->is_boolean())
      continue;
    r.Add(
        name->get<std::string>().substr(0, 64), applied->get<bool>(),
        detail != l.end() && detail->is_string() ? detail->get<std::string>().substr(0, 512) : "");
  }
  return r;
}

std::string Report::Summary() const {
  std::vector<std::string> missing = Missing();
  if (missing.empty()) return "sandbox: complete";
  return fmt::format("sandbox: partial, missing {}", fmt::join(missing, ", "));
}

std::string Violation::ToString() const {
  return fmt::format("rank {} called {} ({})", rank, syscall, ForbiddenBecause(syscall));
}

std::string ForbiddenBecause(const std::string& s) {
  if (s == "execve" || s == "execveat") return "forbidden: running programs";
  if (s == "fork" || s == "vfork" || s == "clone" || s == "clone3")
    return "forbidden: new processes";
  if (s == "socket" || s == "connect" || s == "bind" || s == "listen" || s == "accept" ||
      s == "accept4" || s == "socketpair") {
    return "forbidden: network and new sockets";
  }
  if (s == "kill" || s == "tkill" || s == "tgkill" || s == "rt_sigqueueinfo" ||
      s == "rt_tgsigqueueinfo" || s == "pidfd_send_signal") {
    return "forbidden: signals to other processes";
  }
  if (s == "ptrace" || s == "process_vm_readv" || s == "process_vm_writev" || s == "pidfd_getfd" ||
      s == "pidfd_open" || s == "kcmp") {
    return "forbidden: reaching into other processes";
  }
  if (s == "mount" || s == "umount2" || s == "unshare" || s == "setns" || s == "chroot" ||
      s == "pivot_root") {
    return "forbidden: changing namespaces or mounts";
  }
  return "not on the sandbox's allowlist";
}

}  // namespace kforge::sandbox
