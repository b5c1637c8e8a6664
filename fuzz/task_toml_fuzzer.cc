// Loading task.toml (evaluator/task): any file content must give a task or an
// error naming the file, never a crash or an exception.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "kforge/evaluator/task.h"

namespace fs = std::filesystem;

namespace {

// A task folder (named like one, with a reference beside task.toml), made
// once and removed at exit. The path is never destroyed: the exit handler
// runs after static destructors registered later.
const fs::path& TaskDir() {
  static const fs::path* dir = [] {
    fs::path root = fs::temp_directory_path() / ("kforge-fuzz-task-" + std::to_string(getpid()));
    auto* d = new fs::path(root / "001_fuzz");
    fs::create_directories(*d / "solutions");
    std::ofstream(*d / "reference.cu") << "// reference\n";
    std::ofstream(*d / "solutions" / "a.cu") << "// solution\n";
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(TaskDir().parent_path(), ec);
    });
    return d;
  }();
  return *dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream out(TaskDir() / "task.toml", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  kforge::Result<kforge::eval::Task> task = kforge::eval::LoadTask(TaskDir());
  if (!task.ok() && task.status().message().find("task.toml") == std::string::npos) std::abort();
  return 0;
}
