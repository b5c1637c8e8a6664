#include "toolchain.h"

#include <glob.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include "kforge/core/subprocess.h"

#ifndef KFORGE_CUDA_ROOT
#define KFORGE_CUDA_ROOT ""
#endif

namespace kforge::eval {
namespace fs = std::filesystem;
namespace {

bool IsExecutable(const fs::path& p) {
  return !p.empty() && access(p.c_str(), X_OK) == 0 && !fs::is_directory(p);
}

void AddConfFile(const fs::path& conf, std::vector<fs::path>& dirs, int depth) {
  std::ifstream in(conf);
  std::string line;
  while (depth < 4 && std::getline(in, line)) {
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos) continue;
    line = line.substr(b, line.find_last_not_of(" \t\r") - b + 1);
    if (line.starts_with("include")) {
      std::string pattern = line.substr(7);
      pattern = pattern.substr(pattern.find_first_not_of(" \t"));
      if (!pattern.starts_with("/")) pattern = (conf.parent_path() / pattern).string();
      glob_t g{};
      if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; ++i) AddConfFile(g.gl_pathv[i], dirs, depth + 1);
      }
      globfree(&g);
    } else if (line.starts_with("/")) {
      dirs.emplace_back(line);
    }
  }
}

}  // namespace

std::vector<fs::path> DefaultNvccLocations() {
  std::vector<fs::path> out = {"/usr/local/cuda/bin/nvcc"};
  std::string built_with = KFORGE_CUDA_ROOT;
  if (!built_with.empty()) {
    fs::path p = fs::path(built_with) / "bin" / "nvcc";
    if (p != out.front()) out.push_back(p);
  }
  return out;
}

Result<fs::path> FindNvcc(const fs::path& explicit_path, const std::string& cuda_home,
                          const std::vector<fs::path>& defaults) {
  if (!explicit_path.empty()) {
    if (IsExecutable(explicit_path)) return explicit_path;
    return Error(ErrorKind::kNotFound,
                 "nvcc not found: " + explicit_path.string() +
                     " (given explicitly) does not exist or is not executable");
  }
  std::string looked;
  if (!cuda_home.empty()) {
    fs::path p = fs::path(cuda_home) / "bin" / "nvcc";
    if (IsExecutable(p)) return p;
    looked += p.string() + " ($CUDA_HOME), ";
  } else {
    looked += "$CUDA_HOME/bin/nvcc ($CUDA_HOME unset), ";
  }
  for (const fs::path& p : defaults) {
    if (IsExecutable(p)) return p;
    looked += p.string() + ", ";
  }
  if (fs::path p = FindInPath("nvcc"); !p.empty()) return p;
  looked += "nvcc in $PATH";
  return Error(ErrorKind::kNotFound, "nvcc not found; looked at " + looked +
                                         ". Install the CUDA toolkit or set CUDA_HOME.");
}

std::vector<fs::path> LibrarySearchDirs(const fs::path& nvcc) {
  std::vector<fs::path> dirs;
  if (const char* ld = std::getenv("LD_LIBRARY_PATH")) {
    std::string list = ld;
    size_t start = 0;
    while (start <= list.size()) {
      size_t end = list.find(':', start);
      if (end == std::string::npos) end = list.size();
      if (end > start) dirs.emplace_back(list.substr(start, end - start));
      start = end + 1;
    }
  }
  if (!nvcc.empty()) {
    fs::path root = nvcc.parent_path().parent_path();
    dirs.push_back(root / "lib64");
    std::error_code ec;
    for (const auto& target : fs::directory_iterator(root / "targets", ec))
      dirs.push_back(target.path() / "lib");
  }
  AddConfFile("/etc/ld.so.conf", dirs, 0);
  for (const char* d : {"/lib64", "/usr/lib64", "/lib", "/usr/lib"}) dirs.emplace_back(d);
  // Keep the first occurrence of each directory.
  std::vector<fs::path> unique;
  std::set<fs::path> seen;
  for (fs::path& d : dirs) {
    if (seen.insert(d).second) unique.push_back(std::move(d));
  }
  return unique;
}

}  // namespace kforge::eval
