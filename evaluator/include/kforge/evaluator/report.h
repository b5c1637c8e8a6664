// Human-readable rendering of a kforge.eval/1 document (the table `kforge eval` prints).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kforge::eval {

std::string RenderEvalReport(const nlohmann::json& doc);

// The result's "profile" in a few lines (DRAM traffic and throughput, L2,
// occupancy, the three longest warp stalls), or the one line saying why it
// was skipped; empty without one. The report and the model's feedback share it.
std::vector<std::string> ProfileLines(const nlohmann::json& profile);

// Process exit status for a result status: passed/compiled 0, compile_error 2,
// policy_violation 3, runtime_error 4, mismatch 5, timeout 6, harness_error 7,
// integrity_violation 9.
int ExitCodeFor(const std::string& status);

}  // namespace kforge::eval
