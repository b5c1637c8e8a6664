#include "feedback_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kforge/core/json.h"
#include "kforge/core/untrusted_text.h"

namespace kforge::agent {
namespace {

using nlohmann::json;

// The metric names the worker collects (eval::ProfileMetricNames).
constexpr const char* kDramPct = "dram__throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* kDramRead = "dram__bytes_read.sum";
constexpr const char* kDramWrite = "dram__bytes_write.sum";
constexpr const char* kL2Hit = "lts__t_sector_hit_rate.pct";
constexpr const char* kOccupancy = "sm__warps_active.avg.pct_of_peak_sustained_active";
constexpr const char* kSmPct = "sm__throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* kStallPrefix = "smsp__average_warps_issue_stalled_";
constexpr const char* kStallSuffix = "_per_issue_active.ratio";
constexpr size_t kShownStalls = 3;
constexpr size_t kMaxSkipReason = 300;

// What each stall reason waits on, after Nsight Compute's descriptions of
// the warp states (its Profiling Guide), so that a reason names what to change.
struct StallReason {
  const char* name;
  const char* meaning;
};
constexpr StallReason kStallReasons[] = {
    {"long_scoreboard", "waiting for a global or local memory load"},
    {"barrier", "waiting at a block barrier"},
    {"membar", "waiting on a memory fence"},
    {"lg_throttle", "the global/local memory instruction queue is full"},
    {"mio_throttle", "the shared-memory and special-instruction queue is full"},
    {"math_pipe_throttle", "a math pipe is busy"},
    {"short_scoreboard", "waiting for shared memory or a special-function result"},
    {"wait", "a fixed-latency dependency"},
};

const char* StallMeaning(const std::string& reason) {
  for (const auto& r : kStallReasons) {
    if (reason == r.name) return r.meaning;
  }
  return nullptr;
}

// A finite number the metrics hold under `name`.
bool Get(const json& metrics, const char* name, double* out) {
  auto it = metrics.find(name);
  if (it == metrics.end() || !it->is_number()) return false;
  *out = it->get<double>();
  return std::isfinite(*out);
}

// Bytes of one call, in the unit a model reads at a glance.
std::string Bytes(double b) {
  return b >= 1e9 ? fmt::format("{:.2f} GB", b / 1e9) : fmt::format("{:.1f} MB", b / 1e6);
}

std::string DramLine(const json& m) {
  double pct = 0, read = 0, write = 0;
  const bool has_pct = Get(m, kDramPct, &pct);
  std::string bytes;
  if (Get(m, kDramRead, &read)) bytes = Bytes(read) + " read";
  if (Get(m, kDramWrite, &write)) bytes += (bytes.empty() ? "" : ", ") + Bytes(write) + " written";
  if (!bytes.empty()) bytes += " per call";
  if (has_pct) {
    return fmt::format("DRAM throughput: {:.1f}% of peak{}", pct,
                       bytes.empty() ? "" : " (" + bytes + ")");
  }
  return bytes.empty() ? "" : "DRAM traffic: " + bytes;
}

// "where warps stall (...): long_scoreboard 76% (...), ..." over the stall
// reasons measured, the largest first; empty without any above zero.
std::string StallLine(const json& m) {
  const std::string prefix = kStallPrefix, suffix = kStallSuffix;
  std::vector<std::pair<double, std::string>> stalls;
  double total = 0;
  size_t measured = 0;
  for (auto it = m.begin(); it != m.end(); ++it) {
    const std::string& key = it.key();
    if (key.size() <= prefix.size() + suffix.size() || key.rfind(prefix, 0) != 0 ||
        !key.ends_with(suffix) || !it->is_number())
      continue;
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < 0) continue;
    ++measured;
    total += v;
    if (v > 0)
      stalls.emplace_back(v, key.substr(prefix.size(), key.size() - prefix.size() - suffix.size()));
  }
  if (stalls.empty() || total <= 0) return "";
  std::sort(stalls.begin(), stalls.end(), std::greater<>());
  std::string line =
      fmt::format("where warps stall (shares of the {} stall reasons measured):", measured);
  for (size_t i = 0; i < stalls.size() && i < kShownStalls; ++i) {
    const auto& [v, reason] = stalls[i];
    const char* meaning = StallMeaning(reason);
    line += fmt::format("{} {} {:.0f}%{}", i ? "," : "", reason, 100 * v / total,
                        meaning ? fmt::format(" ({})", meaning) : "");
  }
  return line;
}

}  // namespace

json ProfileView(const json& eval) {
  if (!eval.is_object()) return nullptr;
  auto p = eval.find("profile");
  if (p == eval.end() || !p->is_object()) return nullptr;
  std::string size = JsonString(*p, "size");
  if (size.empty()) size = "the last bench size";
  json lines = json::array();
  if (auto skipped = p->find("skipped"); skipped != p->end()) {
    // The reason may quote the candidate's own process: one printable line.
    std::string why = skipped->is_string() ? skipped->get<std::string>() : skipped->dump();
    why = PrintableText(why.substr(0, kMaxSkipReason), /*keep_newlines=*/false);
    lines.push_back("skipped, no counters this time: " + why);
    return {{"size", size}, {"lines", lines}};
  }
  const json m = p->value("metrics", json::object());
  if (!m.is_object()) return nullptr;
  double v = 0;
  if (std::string dram = DramLine(m); !dram.empty()) lines.push_back(dram);
  if (Get(m, kL2Hit, &v)) lines.push_back(fmt::format("L2 hit rate: {:.1f}%", v));
  if (Get(m, kOccupancy, &v)) {
    lines.push_back(
        fmt::format("achieved occupancy: {:.1f}% of the SM's maximum warps were active", v));
  }
  if (Get(m, kSmPct, &v)) lines.push_back(fmt::format("SM throughput: {:.1f}% of peak", v));
  if (std::string stalls = StallLine(m); !stalls.empty()) lines.push_back(stalls);
  if (lines.empty()) return nullptr;
  return {{"size", size}, {"lines", lines}};
}

}  // namespace kforge::agent
