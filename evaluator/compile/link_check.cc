#include "link_check.h"

#include <deque>

#include "demangle.h"

namespace kforge::eval {
namespace fs = std::filesystem;
namespace {

Diagnostic LinkError(std::string message) {
  Diagnostic d;
  d.severity = Severity::kError;
  d.message = std::move(message);
  return d;
}

}  // namespace

std::set<std::string> HarnessSymbols() {
  return {"kf_all_reduce",
          "kf_all_gather",
          "kf_reduce_scatter",
          "kf_broadcast",
          "kf_reduce",
          "kf_all_to_all",
          "kf_all_to_allv",
          "kf_group_start",
          "kf_group_end",
          "kf_send",
          "kf_recv",
          "kf_barrier",
          "kf_group_all_reduce",
          "kf_group_all_gather",
          "kf_group_reduce_scatter",
          "kf_group_broadcast",
          "kf_group_all_to_all",
          "kf_group_barrier"};
}

LinkChecker::LinkChecker(std::vector<fs::path> search_dirs, std::set<std::string> host_symbols,
                         std::vector<fs::path> host_libraries)
    : search_dirs_(std::move(search_dirs)),
      host_symbols_(std::move(host_symbols)),
      host_libraries_(std::move(host_libraries)) {}

LinkChecker::Exports LinkChecker::Load(const fs::path& path) {
  {
    MutexLock lock(&mu_);
    if (auto it = loaded_.find(path); it != loaded_.end()) return it->second;
  }
  Result<DynamicInfo> info = ReadDynamicInfo(path);
  Exports exports =
      info.ok() ? std::make_shared<const DynamicInfo>(std::move(info).value()) : nullptr;
  MutexLock lock(&mu_);
  return loaded_.emplace(path, exports).first->second;
}

fs::path LinkChecker::Locate(const std::string& needed, const std::vector<fs::path>& dirs) const {
  if (needed.find('/') != std::string::npos)
    return fs::exists(needed) ? fs::path(needed) : fs::path();
  for (const fs::path& dir : dirs) {
    std::error_code ec;
    fs::path candidate = dir / needed;
    if (fs::is_regular_file(candidate, ec)) return candidate;
  }
  return {};
}

std::vector<Diagnostic> LinkChecker::Check(const DynamicInfo& kernel,
                                           const std::vector<fs::path>& extra_dirs) {
  std::vector<fs::path> dirs(kernel.runpath.begin(), kernel.runpath.end());
  dirs.insert(dirs.end(), extra_dirs.begin(), extra_dirs.end());
  dirs.insert(dirs.end(), search_dirs_.begin(), search_dirs_.end());

  std::vector<Diagnostic> errors;
  std::set<std::string> provided = host_symbols_;
  auto add_exports = [&](const DynamicInfo& lib) {
    for (const ElfSymbol& s : lib.exported) provided.insert(s.name);
  };
  for (const fs::path& lib : host_libraries_) {
    if (Exports e = Load(lib)) add_exports(*e);
  }
  // Breadth first over the DT_NEEDED closure, as the loader does.
  std::deque<std::string> queue(kernel.needed.begin(), kernel.needed.end());
  std::set<std::string> visited;
  bool missing_library = false;
  while (!queue.empty()) {
    std::string name = std::move(queue.front());
    queue.pop_front();
    if (!visited.insert(name).second) continue;
    fs::path path = Locate(name, dirs);
    Exports lib = path.empty() ? nullptr : Load(path);
    if (lib == nullptr) {
      missing_library = true;
      errors.push_back(
          LinkError("the kernel needs " + name +
                    ", which the loader will not find (no readable library of that name in the "
                    "library search path)"));
      continue;
    }
    add_exports(*lib);
    queue.insert(queue.end(), lib->needed.begin(), lib->needed.end());
  }
  // When a library is missing, its symbols would all be reported too: the
  // missing library is the one useful message.
  if (missing_library) return errors;
  for (const ElfSymbol& s : kernel.undefined) {
    if (s.weak || provided.count(s.name) != 0) continue;
    errors.push_back(LinkError("undefined reference to '" + Demangle(s.name) +
                               "': no library the kernel links, nor the harness, defines it"));
  }
  return errors;
}

}  // namespace kforge::eval
