#include <cstdlib>
#include <filesystem>

#include "kforge/evaluator/evaluate.h"

namespace kforge::eval {

std::filesystem::path DefaultTasksDir() {
  if (const char* env = std::getenv("KFORGE_TASKS_DIR"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  if (std::filesystem::is_directory("tasks", ec)) return std::filesystem::path("tasks");
  return std::filesystem::path(KFORGE_SOURCE_ROOT) / "tasks";
}

}  // namespace kforge::eval
