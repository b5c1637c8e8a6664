// The tasks directory: every task folder in it (where it is: task_select.cc).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>

#include "kforge/evaluator/task.h"
#include "task/task_key.h"

namespace kforge::eval {

namespace fs = std::filesystem;
using internal::SplitKey;

Result<std::vector<Task>> LoadTasks(const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return Error(ErrorKind::kNotFound, fmt::format("{}: no such tasks directory", root.string()));
  }
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory()) continue;
    // Folders that are not named like a task (e.g. common/) are not tasks;
    // one that is named like a task but has no task.toml is an error.
    if (SplitKey(entry.path().filename().string())) dirs.push_back(entry.path());
  }
  if (ec) return Error(ErrorKind::kIo, fmt::format("{}: {}", root.string(), ec.message()));
  std::sort(dirs.begin(), dirs.end());
  std::vector<Task> tasks;
  std::map<int, std::string> ids;
  for (const auto& dir : dirs) {
    KF_ASSIGN_OR_RETURN(Task t, LoadTask(dir));
    auto [it, fresh] = ids.emplace(t.id, t.key);
    if (!fresh) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("{}: id {} is already used by {}", (dir / "task.toml").string(),
                               t.id, it->second));
    }
    tasks.push_back(std::move(t));
  }
  return tasks;
}

const Task* FindTask(const std::vector<Task>& tasks, std::string_view selector) {
  for (const Task& t : tasks) {
    if (t.key == selector) return &t;
  }
  const bool numeric =
      !selector.empty() && std::all_of(selector.begin(), selector.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      });
  for (const Task& t : tasks) {
    if (numeric ? (selector.size() <= 6 && t.id == std::stoi(std::string(selector)))
                : t.name == selector) {
      return &t;
    }
  }
  return nullptr;
}

}  // namespace kforge::eval
