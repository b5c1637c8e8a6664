// The profile in the feedback: what `kforge eval --profile` put in an
// evaluation (docs/eval-result.md, "profile") condensed to the few lines a
// model can act on (docs/agent.md, "Profile").
#pragma once

#include <nlohmann/json.hpp>

namespace kforge::agent {

// The template view of `eval`'s profile: {size, lines[]} where `lines` are
// DRAM throughput as a share of peak (with the bytes of one call), the L2 hit
// rate, achieved occupancy, SM throughput and the three longest warp stalls
// with their shares, each only when the document has its metric; or a
// single line saying why the profile was skipped. Null when the document has
// no profile, or one with none of these metrics.
nlohmann::json ProfileView(const nlohmann::json& eval);

}  // namespace kforge::agent
