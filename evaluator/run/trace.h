// Diagnosis traces: JSON lines appended to the file an environment variable
// names (docs/methodology.md, "Trace"). Nothing reads them back; with the
// variable unset each call costs one getenv.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

namespace kforge::eval {

// KFORGE_TIMING_TRACE: one line per driven block (run/drive.cc).
inline constexpr const char* kTimingTrace = "KFORGE_TIMING_TRACE";
// KFORGE_EXCHANGE_TRACE: one line per exchange with a group, with its start
// on the steady clock and its seconds, to see where an evaluation's time goes.
inline constexpr const char* kExchangeTrace = "KFORGE_EXCHANGE_TRACE";

bool Tracing(const char* variable);
// Appends `line` to the file `variable` names, if it names one.
void AppendTrace(const char* variable, const nlohmann::json& line);
// One KFORGE_EXCHANGE_TRACE line: `what` done with `group` from t0 until now.
void TraceExchange(const std::string& group, const std::string& what, const std::string& phase,
                   std::chrono::steady_clock::time_point t0);

}  // namespace kforge::eval
