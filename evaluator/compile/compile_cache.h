// The on-disk compile cache: <cache_dir>/kernels/<key>/ holds kernel.so (when
// the compile succeeded), the source, and record.json (outcome, diagnostics,
// log, resource usage, seconds). An entry is built in a private temp directory beside it and
// renamed into place, so readers see a whole entry or none, and concurrent
// compiles of the same source (threads or processes) are safe: the first
// rename wins and the others discard their copy.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/evaluator/diagnostics.h"
#include "kforge/evaluator/resource_usage.h"

namespace kforge::eval {

struct CacheRecord {
  bool ok = false;
  std::string message;  // the compile error's message when !ok
  std::vector<Diagnostic> diagnostics;
  std::string log;
  std::vector<KernelResources> resources;  // ptxas -v, when the compile got that far
  double seconds = 0;                      // how long the original compile took
};

inline constexpr const char* kSharedObjectName = "kernel.so";

// The entry for `key`, or nullopt when absent or unreadable (a miss). An
// entry whose kernel.so is over `max_object_bytes` (left by an older kforge
// that had no such limit) is removed and is a miss.
std::optional<CacheRecord> LoadCacheRecord(const std::filesystem::path& entry_dir,
                                           uint64_t max_object_bytes);

// Writes record.json into `staging` and renames it to `entry_dir`. When
// another writer got there first, `staging` is removed and that entry stands.
Status PublishCacheEntry(const std::filesystem::path& staging,
                         const std::filesystem::path& entry_dir, const CacheRecord& record);

}  // namespace kforge::eval
