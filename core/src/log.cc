#include "kforge/core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "kforge/core/mutex.h"

namespace kforge {
namespace {

LogLevel InitialLevel() {
  const char* v = std::getenv("KFORGE_LOG");
  if (!v) return LogLevel::kInfo;
  if (!std::strcmp(v, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(v, "warn")) return LogLevel::kWarn;
  if (!std::strcmp(v, "error")) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<LogLevel>& Level() {
  static std::atomic<LogLevel> level{InitialLevel()};
  return level;
}

}  // namespace

void SetLogLevel(LogLevel level) { Level() = level; }
LogLevel GetLogLevel() { return Level(); }

void LogLine(LogLevel level, std::string_view component, std::string_view message) {
  static Mutex mu;  // one line at a time on stderr
  static const char* kNames[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  MutexLock lock(&mu);
  std::fprintf(stderr, "%02d:%02d:%02d.%03d %-5s %.*s: %.*s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
               ms, kNames[static_cast<int>(level)], static_cast<int>(component.size()),
               component.data(), static_cast<int>(message.size()), message.data());
}

}  // namespace kforge
