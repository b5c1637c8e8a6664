// `kforge tasks list | show | validate`: the benchmark's tasks as a table, as
// the card a model sees, and checked end to end (parse, shapes, oracle).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <memory>

#include "command.h"
#include "exit_codes.h"
#include "json_output.h"
#include "kforge/evaluator/evaluate.h"
#include "kforge/evaluator/task.h"
#include "kforge/evaluator/task_card.h"
#include "kforge/evaluator/task_check.h"
#include "kforge/evaluator/task_select.h"

namespace kforge::cli {
namespace {

struct TasksArgs {
  std::string tasks_dir;
  std::string id;
  int world = 0;
  std::string dtype;
  std::string json;  // --json FILE|-
};

std::filesystem::path TasksDir(const TasksArgs& a) { return eval::TasksDir(a.tasks_dir); }

std::string Join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::string Join(const std::vector<eval::Dtype>& v) {
  std::string s;
  for (auto d : v) s += (s.empty() ? "" : ",") + std::string(eval::DtypeName(d));
  return s;
}

// The task's [expert] for `tasks list --json`: {kernel, technique}, {none}, or null.
nlohmann::json ExpertJson(const eval::Task& t) {
  if (!t.expert) return nullptr;
  if (!t.expert->none.empty()) return {{"none", t.expert->none}};
  return {{"kernel", std::filesystem::relative(t.expert->kernel, t.dir).generic_string()},
          {"technique", t.expert->technique}};
}

int List(const TasksArgs& a) {
  auto tasks = eval::LoadCheckedTasks(TasksDir(a));
  if (!tasks.ok()) return FailWith("tasks list", tasks.status());
  if (!a.json.empty()) {
    nlohmann::json doc = {{"schema", "kforge.tasks/1"},
                          {"tasks_dir", TasksDir(a).string()},
                          {"tasks", nlohmann::json::array()}};
    for (const auto& t : *tasks) {
      nlohmann::json dtypes = nlohmann::json::array();
      for (auto d : t.dtypes) dtypes.push_back(std::string(eval::DtypeName(d)));
      doc["tasks"].push_back({{"key", t.key},
                              {"id", t.id},
                              {"name", t.name},
                              {"title", t.title},
                              {"category", t.category},
                              {"world_sizes", t.world_sizes},
                              {"dtypes", dtypes},
                              {"provenance", t.provenance},
                              {"expert", ExpertJson(t)}});
    }
    if (Status st = WriteJson(a.json, doc); !st.ok()) return FailWith("tasks list", st);
    if (a.json == "-") return 0;
  }
  // Columns as wide as their longest cell, so that the titles line up however
  // long a task's key or dtypes are.
  std::vector<std::array<std::string, 7>> rows = {
      {"KEY", "CATEGORY", "WORLD", "DTYPES", "SOURCE", "EXPERT", "TITLE"}};
  for (const auto& t : *tasks) {
    // Where the workload comes from: "PKB #13", else the provenance up to its
    // first ';', '(' or ':', at most kSourceWidth characters.
    constexpr size_t kSourceWidth = 32;
    std::string source = t.provenance.substr(0, t.provenance.find_first_of(";(:"));
    if (source.rfind("PKB #", 0) == 0) {
      size_t end = 5;
      while (end < source.size() && std::isdigit(static_cast<unsigned char>(source[end]))) ++end;
      source.resize(end);
    }
    while (!source.empty() && source.back() == ' ') source.pop_back();
    if (source.size() > kSourceWidth) source = source.substr(0, kSourceWidth - 3) + "...";
    // The best known human kernel: its file, "none" (the task says why), or "-" (not stated).
    const std::string expert = !t.expert                  ? "-"
                               : t.expert->kernel.empty() ? "none"
                                                          : t.expert->kernel.filename().string();
    rows.push_back({t.key, t.category, Join(t.world_sizes), Join(t.dtypes),
                    source.empty() ? "-" : source, expert, t.title});
  }
  std::array<size_t, 7> width{};
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c + 1 < row.size(); ++c) line += fmt::format("{:<{}}  ", row[c], width[c]);
    std::printf("%s%s\n", line.c_str(), row.back().c_str());
  }
  return 0;
}

int Show(const TasksArgs& a) {
  auto tasks = eval::LoadCheckedTasks(TasksDir(a));
  if (!tasks.ok()) return FailWith("tasks show", tasks.status());
  auto selected = eval::SelectOneTask(*tasks, a.id, TasksDir(a).string());
  if (!selected.ok()) return FailWith("tasks show", selected.status());
  const eval::Task* t = *selected;
  const int world = a.world > 0 ? a.world : t->world_sizes.front();
  if (Status st = eval::CheckTaskProblem(*t, world, a.dtype); !st.ok())
    return FailWith("tasks show", st);
  eval::Dtype dtype = t->dtypes.front();
  if (!a.dtype.empty()) dtype = *eval::ParseDtype(a.dtype);  // CheckTaskProblem parsed it
  std::fputs(eval::RenderTaskCard(*t, world, dtype).c_str(), stdout);
  return 0;
}

int Validate(const TasksArgs& a) {
  auto tasks = eval::LoadTasks(TasksDir(a));
  if (!tasks.ok()) {
    std::printf("FAIL  %s\n", tasks.status().message().c_str());
    return 1;
  }
  std::vector<const eval::Task*> selected;
  if (a.id.empty()) {
    for (const auto& t : *tasks) selected.push_back(&t);
  } else if (auto t = eval::SelectOneTask(*tasks, a.id, TasksDir(a).string()); t.ok()) {
    selected.push_back(*t);
  } else {
    std::printf("FAIL  %s\n", t.status().message().c_str());
    return kExitUsage;
  }
  int failures = 0;
  // A fixed seed: validation is about the task, and failures must reproduce.
  constexpr uint64_t kSeed = 0x6b666f7267652d76ULL;
  for (const eval::Task* t : selected) {
    const auto start = std::chrono::steady_clock::now();
    Status s = eval::ValidateShapes(*t);
    Result<eval::OracleCheckStats> stats =
        s.ok() ? eval::CheckOracle(*t, kSeed) : Result<eval::OracleCheckStats>(s);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (stats.ok()) {
      std::printf("ok    %-28s %d problems, %lld oracle values finite (%.2f s)\n", t->key.c_str(),
                  stats->problems, static_cast<long long>(stats->output_values), secs);
    } else {
      ++failures;
      std::printf("FAIL  %-28s %s\n", t->key.c_str(), stats.status().message().c_str());
    }
  }
  if (selected.empty()) std::printf("no tasks in %s\n", TasksDir(a).c_str());
  std::fflush(stdout);
  return failures == 0 ? 0 : 1;
}

void AddTasksDir(CLI::App* cmd, TasksArgs& a) {
  cmd->add_option("--tasks-dir", a.tasks_dir,
                  "tasks folder (default: $KFORGE_TASKS_DIR, ./tasks, the source tree's)");
}

KF_COMMAND("tasks", [](CLI::App& app, int& exit_code) {
  auto args = std::make_shared<TasksArgs>();
  CLI::App* tasks = app.add_subcommand("tasks", "List, show and validate the benchmark's tasks");
  tasks->require_subcommand(1);

  CLI::App* list = tasks->add_subcommand(
      "list", "One line per task: key, category, world sizes, dtypes, source, title");
  AddTasksDir(list, *args);
  AddJsonOption(list, args->json);
  list->callback([args, &exit_code] { exit_code = List(*args); });

  CLI::App* show = tasks->add_subcommand("show", "Print the task card a model sees");
  AddTasksDir(show, *args);
  show->add_option("id", args->id, "task key, number or name")->required();
  show->add_option("--world", args->world, "world size (default: the task's first)");
  show->add_option("--dtype", args->dtype, "dtype T (default: the task's first)");
  show->callback([args, &exit_code] { exit_code = Show(*args); });

  CLI::App* validate = tasks->add_subcommand("validate",
                                             "Parse every task, instantiate every size at every W "
                                             "and dtype, run each oracle at the check sizes");
  AddTasksDir(validate, *args);
  validate->add_option("id", args->id, "only this task (key, number or name)");
  validate->callback([args, &exit_code] { exit_code = Validate(*args); });
});

}  // namespace
}  // namespace kforge::cli
