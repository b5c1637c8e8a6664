#include "run/trace.h"

#include <cstdio>
#include <cstdlib>

namespace kforge::eval {

bool Tracing(const char* variable) {
  const char* path = std::getenv(variable);
  return path != nullptr && *path != '\0';
}

void AppendTrace(const char* variable, const nlohmann::json& line) {
  const char* path = std::getenv(variable);
  if (path == nullptr || *path == '\0') return;
  if (FILE* f = std::fopen(path, "a")) {
    const std::string text = line.dump() + "\n";
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
}

void TraceExchange(const std::string& group, const std::string& what, const std::string& phase,
                   std::chrono::steady_clock::time_point t0) {
  if (!Tracing(kExchangeTrace)) return;
  const auto now = std::chrono::steady_clock::now();
  AppendTrace(kExchangeTrace,
              nlohmann::json{{"group", group},
                             {"op", what},
                             {"phase", phase},
                             {"t_s", std::chrono::duration<double>(t0.time_since_epoch()).count()},
                             {"s", std::chrono::duration<double>(now - t0).count()}});
}

}  // namespace kforge::eval
