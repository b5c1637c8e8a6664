// Logs are for people: one line per event, "HH:MM:SS.mmm LEVEL component: message".
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace kforge {

enum class LogLevel { kDebug = 0, kInfo, kWarn, kError };

// Messages below the level are dropped. Default kInfo; KFORGE_LOG=debug|info|warn|error.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void LogLine(LogLevel level, std::string_view component, std::string_view message);

template <typename... Args>
void LogInfo(std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
  if (GetLogLevel() <= LogLevel::kInfo)
    LogLine(LogLevel::kInfo, component, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void LogWarn(std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
  if (GetLogLevel() <= LogLevel::kWarn)
    LogLine(LogLevel::kWarn, component, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void LogError(std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
  LogLine(LogLevel::kError, component, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void LogDebug(std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
  if (GetLogLevel() <= LogLevel::kDebug)
    LogLine(LogLevel::kDebug, component, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kforge
