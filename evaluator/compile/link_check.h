// The link check of a compiled kernel. A shared object may keep undefined
// references at link time (the harness collectives come from the worker at
// dlopen), so the linker cannot reject a call to a function nobody defines.
// This check does what the dynamic loader will do: every non-weak import must
// be exported by a library in the kernel's DT_NEEDED closure, by a library the
// worker has loaded, or be a symbol the worker itself provides.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "elf_symbols.h"
#include "kforge/core/mutex.h"
#include "kforge/evaluator/diagnostics.h"

namespace kforge::eval {

class LinkChecker {
 public:
  // search_dirs: where DT_NEEDED names are looked up (after the kernel's own
  // RUNPATH). host_symbols / host_libraries: what the worker provides.
  LinkChecker(std::vector<std::filesystem::path> search_dirs, std::set<std::string> host_symbols,
              std::vector<std::filesystem::path> host_libraries);

  // One error per unresolved import and per needed library that cannot be
  // found; empty when the kernel will load. Thread-safe; library symbol tables
  // are read once per checker.
  std::vector<Diagnostic> Check(const DynamicInfo& kernel,
                                const std::vector<std::filesystem::path>& extra_dirs);

 private:
  using Exports = std::shared_ptr<const DynamicInfo>;
  // The library's dynamic info, or null when it cannot be read.
  Exports Load(const std::filesystem::path& path) EXCLUDES(mu_);
  std::filesystem::path Locate(const std::string& needed,
                               const std::vector<std::filesystem::path>& dirs) const;

  std::vector<std::filesystem::path> search_dirs_;
  std::set<std::string> host_symbols_;
  std::vector<std::filesystem::path> host_libraries_;
  Mutex mu_;
  std::map<std::filesystem::path, Exports> loaded_ GUARDED_BY(mu_);
};

// The kf_* harness collectives that kforge/kernel.h declares and the worker exports.
std::set<std::string> HarnessSymbols();

}  // namespace kforge::eval
