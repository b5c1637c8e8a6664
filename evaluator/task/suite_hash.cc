#include "kforge/evaluator/suite_hash.h"

#include <algorithm>
#include <system_error>
#include <vector>

#include "kforge/core/fs.h"
#include "kforge/core/hash.h"

namespace kforge::eval {
namespace {

namespace fs = std::filesystem;

bool Hidden(const fs::path& relative) {
  for (const auto& part : relative) {
    const std::string s = part.string();
    if (!s.empty() && s[0] == '.') return true;
  }
  return false;
}

}  // namespace

Result<std::string> TaskSuiteHash(const fs::path& tasks_dir) {
  std::error_code ec;
  if (!fs::is_directory(tasks_dir, ec))
    return Error(ErrorKind::kNotFound, "no tasks folder " + tasks_dir.string());
  std::vector<std::string> files;  // relative to tasks_dir, '/'-separated
  for (fs::directory_iterator top(tasks_dir, ec), end; !ec && top != end; top.increment(ec)) {
    if (!top->is_directory() || !fs::exists(top->path() / "task.toml")) continue;
    if (Hidden(top->path().filename())) continue;
    for (fs::recursive_directory_iterator it(top->path(), ec), stop; !ec && it != stop;
         it.increment(ec)) {
      const fs::path rel = fs::relative(it->path(), tasks_dir);
      if (Hidden(rel)) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) files.push_back(rel.generic_string());
    }
    if (ec) break;
  }
  if (ec) {
    return Error(ErrorKind::kIo,
                 "hashing the task suite in " + tasks_dir.string() + ": " + ec.message());
  }
  if (files.empty())
    return Error(ErrorKind::kNotFound, "no task folders (with task.toml) in " + tasks_dir.string());
  std::sort(files.begin(), files.end());
  Hasher h;
  h.Add("kforge.task_suite/1");
  for (const auto& f : files) {
    KF_ASSIGN_OR_RETURN(std::string content, ReadFile(tasks_dir / f));
    h.Add(f).Add(content);
  }
  return h.HexDigest();
}

}  // namespace kforge::eval
