// One task-selector grammar for every command (`run --tasks`, `eval --task`,
// `prompt --task`, `tasks show`, `show RUN TASK`), and the check that a task
// can be posed at a world size and dtype before anything is spent on it.
//
// A selector is a key ("001_allreduce"), a number with or without leading
// zeros ("1", "001"), a name ("allreduce"), a glob over keys and names
// ("00*", "*gather"), a category ("collective" or "category:collective"), a
// range of ids ("101-120"), a suite ("pkb": ParallelKernelBench's 87 problems,
// docs/pkb.md; "beyond": the tasks beyond it, docs/beyond-pkb.md), or "all" /
// "*". Lists are comma-separated where a command takes several.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::eval {

struct Task;

// Task ids 1-87 are ParallelKernelBench's problems with its numbers; ids from
// 101 are the tasks beyond it.
inline constexpr int kLastPkbId = 87;
inline constexpr int kFirstBeyondPkbId = 101;

// What a selector is matched against: a task's names, from its folder or
// from a stored key.
struct TaskRef {
  std::string key;   // "001_allreduce"
  std::string name;  // "allreduce"
  int id = 0;
  std::string category;
};

// The tasks the selectors pick, in suite order, each once. A selector that
// picks nothing is an error naming it.
Result<std::vector<std::string>> SelectTasks(const std::vector<std::string>& selectors,
                                             const std::vector<TaskRef>& suite);

// LoadTasks plus every shape check of `kforge tasks validate` except
// the oracle run (ValidateShapes): a task whose sizes do not
// instantiate (a negative size, say) is refused on load by every command,
// naming its task.toml.
Result<std::vector<Task>> LoadCheckedTasks(const std::filesystem::path& dir);

// The tasks folder: `flag` (--tasks-dir) when given, else $KFORGE_TASKS_DIR,
// else ./tasks, else an installed tree's <prefix>/share/kforge/tasks, else
// the source tree's tasks/.
std::filesystem::path TasksDir(const std::string& flag);

TaskRef RefFor(const Task& task);
// A reference built from a stored key alone ("001_allreduce": id 1, name
// "allreduce"), for commands that read runs rather than task folders.
TaskRef RefFromKey(const std::string& key);

// The one task a selector names; kInvalidInput when it names none ("no task
// 'x' in DIR") or several (listing them).
Result<const Task*> SelectOneTask(const std::vector<Task>& tasks, const std::string& selector,
                                  const std::string& tasks_dir);

// Refuses a world size or dtype the task does not declare, and a task whose
// sizes do not instantiate at that world size and dtype (say a negative
// size), naming the task and what it supports. `dtype` empty: the task's
// default. `world` 0: no world size check.
Status CheckTaskProblem(const Task& task, int world, const std::string& dtype);

}  // namespace kforge::eval
