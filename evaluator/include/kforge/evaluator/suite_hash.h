// The task suite's fingerprint. A coordinator and an evaluation server must
// judge kernels against the same tasks (the same shapes, tolerances, oracle
// and reference); the hash lets the server refuse a client whose suite
// differs instead of returning verdicts for other tasks.
#pragma once

#include <filesystem>
#include <string>

#include "kforge/core/status.h"

namespace kforge::eval {

// SHA-256 (lower-case hex) over every task folder under `tasks_dir` (a folder
// holding task.toml): the sorted paths of its regular files relative to
// `tasks_dir`, each followed by its contents, length-prefixed. Hidden files
// and folders (".name") are left out, so editor and VCS state does not count;
// everything else does (task.toml, reference.cu, oracle.cpp, solutions/).
// The hash does not depend on where the folder is, on timestamps or on the
// order the filesystem lists entries in. kNotFound when there is no task folder.
Result<std::string> TaskSuiteHash(const std::filesystem::path& tasks_dir);

}  // namespace kforge::eval
