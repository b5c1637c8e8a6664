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

}  // namespace kforge::eval
