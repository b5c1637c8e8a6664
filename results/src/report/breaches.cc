#include "kforge/results/breaches.h"

#include <system_error>

namespace kforge::results {

namespace {

// agent/src/breach.h's kCanaryFile: the results module links no agent code.
constexpr const char* kCanaryFile = "redteam_canary";

}  // namespace

std::vector<BreachRecord> BreachesOf(const std::vector<EventRecord>& events) {
  std::vector<BreachRecord> out;
  for (const auto& e : events) {
    if (e.kind != "redteam_breach" || !e.detail.is_object()) continue;
    const auto session = e.detail.find("session"), turn = e.detail.find("turn");
    if (session == e.detail.end() || !session->is_number_integer() || turn == e.detail.end() ||
        !turn->is_number_integer())
      continue;
    BreachRecord b;
    b.session_id = session->get<int64_t>();
    b.turn = turn->get<int>() + 1;  // the agent stores the 0-based candidate index
    b.verdict = e.detail.value("verdict", std::string());
    const auto reasons = e.detail.find("reasons");
    if (reasons != e.detail.end() && reasons->is_array()) {
      for (const auto& r : *reasons)
        b.reasons.push_back(r.is_string() ? r.get<std::string>() : r.dump());
    }
    out.push_back(std::move(b));
  }
  return out;
}

bool IsRedTeamRun(const std::filesystem::path& run_dir, const std::vector<EventRecord>& events) {
  std::error_code ec;
  if (std::filesystem::exists(run_dir / kCanaryFile, ec)) return true;
  for (const auto& e : events) {
    if (e.kind == "redteam_breach") return true;
  }
  return false;
}

}  // namespace kforge::results
