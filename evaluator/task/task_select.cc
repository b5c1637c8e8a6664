// Task selection: the selector grammar, the tasks folder, the checks before a
// task is posed (kforge/evaluator/task_select.h).
#include "kforge/evaluator/task_select.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "kforge/core/fs.h"
#include "kforge/evaluator/task.h"

namespace kforge::eval {

std::filesystem::path TasksDir(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("KFORGE_TASKS_DIR"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  if (std::filesystem::is_directory("tasks", ec)) return "tasks";
  if (const auto share = InstalledDataDir();
      !share.empty() && std::filesystem::is_directory(share / "tasks", ec))
    return share / "tasks";
  return std::filesystem::path(KFORGE_SOURCE_ROOT) / "tasks";
}

Result<std::vector<Task>> LoadCheckedTasks(const std::filesystem::path& dir) {
  KF_ASSIGN_OR_RETURN(std::vector<Task> tasks, LoadTasks(dir));
  for (const auto& t : tasks) {
    Status s = ValidateShapes(t);
    if (!s.ok()) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("{}: {} (`kforge tasks validate` checks every task)",
                               (t.dir / "task.toml").string(), s.message()));
    }
  }
  return tasks;
}

namespace {

bool Digits(std::string_view s) {
  return !s.empty() && s.size() <= 6 && std::all_of(s.begin(), s.end(), [](char ch) {
    return std::isdigit(static_cast<unsigned char>(ch)) != 0;
  });
}

// "A-B" with A <= B, both ids: the inclusive range; nullopt otherwise.
std::optional<std::pair<int, int>> IdRange(const std::string& sel) {
  const size_t dash = sel.find('-');
  if (dash == std::string::npos) return std::nullopt;
  const std::string a = sel.substr(0, dash), b = sel.substr(dash + 1);
  if (!Digits(a) || !Digits(b)) return std::nullopt;
  const int lo = std::stoi(a), hi = std::stoi(b);
  if (lo > hi) return std::nullopt;
  return std::pair{lo, hi};
}

}  // namespace

Result<std::vector<std::string>> SelectTasks(const std::vector<std::string>& selectors,
                                             const std::vector<TaskRef>& suite) {
  std::set<std::string> picked;
  for (const auto& sel : selectors) {
    bool any = false;
    std::string category = sel.rfind("category:", 0) == 0 ? sel.substr(9) : "";
    const auto range = IdRange(sel);
    for (const auto& t : suite) {
      bool match = false;
      if (!category.empty()) {
        match = t.category == category;
      } else if (sel == "all" || sel == "*") {
        match = true;
      } else if (range) {
        match = t.id >= range->first && t.id <= range->second;
      } else if (sel == "pkb" || sel == "beyond") {
        match = sel == "pkb" ? t.id >= 1 && t.id <= kLastPkbId : t.id >= kFirstBeyondPkbId;
      } else if (sel.find_first_of("*?[") != std::string::npos) {
        match = fnmatch(sel.c_str(), t.key.c_str(), 0) == 0 ||
                fnmatch(sel.c_str(), t.name.c_str(), 0) == 0;
      } else {
        // A number matches the task's id with or without leading zeros ("1", "001").
        const bool numeric = Digits(sel);
        match = sel == t.key || sel == t.name || (numeric && std::stoi(sel) == t.id) ||
                sel == t.category;
      }
      if (match) {
        picked.insert(t.key);
        any = true;
      }
    }
    if (!any)
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("task selector '{}' matches no task", sel));
  }
  std::vector<std::string> out;
  for (const auto& t : suite) {
    if (picked.count(t.key)) out.push_back(t.key);
  }
  return out;
}

TaskRef RefFor(const Task& task) { return {task.key, task.name, task.id, task.category}; }

TaskRef RefFromKey(const std::string& key) {
  TaskRef ref{key, key, 0, ""};
  size_t digits = 0;
  while (digits < key.size() && std::isdigit(static_cast<unsigned char>(key[digits]))) ++digits;
  if (digits > 0 && digits <= 6) {
    ref.id = std::stoi(key.substr(0, digits));
    if (digits < key.size() && key[digits] == '_') ref.name = key.substr(digits + 1);
  }
  return ref;
}

Result<const Task*> SelectOneTask(const std::vector<Task>& tasks, const std::string& selector,
                                  const std::string& tasks_dir) {
  std::vector<TaskRef> suite;
  for (const auto& t : tasks) suite.push_back(RefFor(t));
  auto keys = SelectTasks({selector}, suite);
  if (!keys.ok()) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("no task '{}' in {} (see `kforge tasks list`)", selector, tasks_dir));
  }
  if (keys->size() != 1) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("task selector '{}' names {} tasks ({}); give one", selector,
                             keys->size(), fmt::join(*keys, ", ")));
  }
  for (const auto& t : tasks) {
    if (t.key == keys->front()) return &t;
  }
  return Error(ErrorKind::kInternal, "selected task vanished");
}

Status CheckTaskProblem(const Task& task, int world, const std::string& dtype) {
  if (world > 0 && std::find(task.world_sizes.begin(), task.world_sizes.end(), world) ==
                       task.world_sizes.end()) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{} supports W in {{{}}}, not {} (--world)", task.key,
                             fmt::join(task.world_sizes, ", "), world));
  }
  Dtype dt = task.dtypes.empty() ? Dtype::kF32 : task.dtypes.front();
  if (!dtype.empty()) {
    KF_ASSIGN_OR_RETURN(dt, ParseDtype(dtype));
    if (std::find(task.dtypes.begin(), task.dtypes.end(), dt) == task.dtypes.end()) {
      std::vector<std::string> names;
      for (Dtype d : task.dtypes) names.emplace_back(DtypeName(d));
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("{} supports dtypes {{{}}}, not {} (--dtype)", task.key,
                               fmt::join(names, ", "), dtype));
    }
  }
  // Every size must instantiate: a model must never be sent a task that
  // cannot be posed (the card would say "does not instantiate").
  const std::vector<int> worlds = world > 0 ? std::vector<int>{world} : task.world_sizes;
  for (int w : worlds) {
    for (const auto* sizes : {&task.check_sizes, &task.bench_sizes}) {
      for (const auto& size : *sizes) {
        auto p = Instantiate(task, w, dt, size, sizes == &task.check_sizes);
        if (!p.ok()) {
          return Error(
              ErrorKind::kInvalidInput,
              fmt::format("{}: {}/task.toml: size '{}' at W={} {}: {}", task.key, task.dir.string(),
                          size.label, w, DtypeName(dt), p.status().message()));
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace kforge::eval
