#include "kforge/evaluator/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <string>

#include "kforge/core/untrusted_text.h"
#include "kforge/evaluator/dtype.h"

namespace kforge::eval {
namespace {

constexpr size_t kReportedKernels = 8;  // compile.resources lines in the report
constexpr const char* kStallPrefix = "smsp__average_warps_issue_stalled_";
constexpr const char* kStallSuffix = "_per_issue_active";

// A string of the document that a kernel's author can choose (a diagnostic,
// an error the candidate's process reported, the message quoting them), on
// one line and without terminal escapes: it cannot draw a line of ours.
std::string Shown(const nlohmann::json& j, const char* key, const char* fallback = "") {
  return PrintableText(j.value(key, std::string(fallback)), /*keep_newlines=*/false);
}

}  // namespace

std::vector<std::string> ProfileLines(const nlohmann::json& profile) {
  if (!profile.is_object()) return {};
  const std::string size = profile.value("size", std::string("?"));
  if (profile.contains("skipped")) {
    return {fmt::format("profile at {}: skipped ({})", size,
                        profile.value("skipped", std::string("?")))};
  }
  const auto m = profile.value("metrics", nlohmann::json::object());
  auto has = [&](const char* k) { return m.contains(k) && m[k].is_number(); };
  auto get = [&](const char* k) { return m[k].get<double>(); };
  std::vector<std::string> out = {
      fmt::format("profile at {}, rank 0 (hardware counters read in the kernel's own process: "
                  "advice, not timing)",
                  size)};
  std::string dram;
  if (has("dram__bytes_read.sum") && has("dram__bytes_write.sum")) {
    dram = fmt::format("DRAM read {:.1f} MB, written {:.1f} MB", get("dram__bytes_read.sum") / 1e6,
                       get("dram__bytes_write.sum") / 1e6);
  }
  if (has("dram__throughput.avg.pct_of_peak_sustained_elapsed")) {
    dram += fmt::format("{}{:.1f}% of peak DRAM throughput", dram.empty() ? "" : ", ",
                        get("dram__throughput.avg.pct_of_peak_sustained_elapsed"));
  }
  if (has("lts__t_sector_hit_rate.pct")) {
    dram += fmt::format("{}L2 hit rate {:.1f}%", dram.empty() ? "" : "; ",
                        get("lts__t_sector_hit_rate.pct"));
  }
  if (!dram.empty()) out.push_back("  " + dram);
  std::string sm;
  if (has("sm__warps_active.avg.pct_of_peak_sustained_active")) {
    sm = fmt::format("warps active {:.1f}% of the SM's maximum (achieved occupancy)",
                     get("sm__warps_active.avg.pct_of_peak_sustained_active"));
  }
  if (has("sm__throughput.avg.pct_of_peak_sustained_elapsed")) {
    sm += fmt::format("{}SM throughput {:.1f}% of peak", sm.empty() ? "" : "; ",
                      get("sm__throughput.avg.pct_of_peak_sustained_elapsed"));
  }
  if (!sm.empty()) out.push_back("  " + sm);
  std::vector<std::pair<double, std::string>> stalls;
  const std::string prefix = kStallPrefix;
  for (auto it = m.begin(); it != m.end(); ++it) {
    const std::string& k = it.key();
    if (k.rfind(prefix, 0) != 0 || !it->is_number()) continue;
    std::string reason = k.substr(prefix.size());
    reason = reason.substr(0, reason.find(kStallSuffix));
    stalls.emplace_back(it->get<double>(), reason);
  }
  std::sort(stalls.begin(), stalls.end(), std::greater<>());
  if (profile.contains("refused_syscalls")) {
    out.push_back(
        fmt::format("  the sandbox refused {} call(s) during the profiled calls (not judged)",
                    profile["refused_syscalls"].size()));
  }
  if (!stalls.empty()) {
    std::string line = "  where warps wait (stalled warps per issued instruction):";
    for (size_t i = 0; i < stalls.size() && i < 3; ++i)
      line += fmt::format("{} {} {:.2f}", i ? "," : "", stalls[i].second, stalls[i].first);
    out.push_back(line);
  }
  return out;
}

std::string RenderEvalReport(const nlohmann::json& d) {
  std::string out;
  // No world when no rank ran (compile-only) and none was asked for.
  const int world = d.value("world", 0);
  out += fmt::format("task      {}  dtype {}  world {}{}\n", d.value("task", "?"),
                     d.value("dtype", "?"), world > 0 ? std::to_string(world) : "-",
                     d.value("emulated", false) ? "  (emulated: ranks share a GPU)"
                     : d.contains("self_test")  ? "  (NCCL self-test: one rank, never timed)"
                                                : "");
  if (d.contains("kernel")) out += fmt::format("kernel    {}\n", d["kernel"].value("path", "?"));
  if (d.contains("compile")) {
    const auto& c = d["compile"];
    out += fmt::format("compile   {:.2f} s{}\n", c.value("seconds", 0.0),
                       c.value("cache_hit", false) ? " (cached)" : "");
    int shown = 0;
    for (const auto& diag : c.value("diagnostics", nlohmann::json::array())) {
      if (diag.value("severity", "") != "error" || shown++ >= 5) continue;
      out += fmt::format("  {}:{}:{}: error: {}\n", Shown(diag, "file", "?"), diag.value("line", 0),
                         diag.value("column", 0), Shown(diag, "message"));
    }
    const auto resources = c.value("resources", nlohmann::json::array());
    for (size_t i = 0; i < resources.size() && i < kReportedKernels; ++i) {
      out += fmt::format("  {}: {}\n", resources[i].value("name", "?"),
                         resources[i].value("summary", ""));
    }
    if (resources.size() > kReportedKernels) {
      out += fmt::format("  ({} more functions)\n", resources.size() - kReportedKernels);
    }
  }
  if (d.contains("policy")) {
    for (const auto& v : d["policy"]["violations"])
      out += "  policy: " + PrintableText(v.get<std::string>(), false) + "\n";
  }
  if (d.contains("correctness")) {
    const auto& c = d["correctness"];
    for (const auto& chk : c.value("checks", nlohmann::json::array())) {
      if (chk.value("passed", false)) continue;
      out += fmt::format("check     {} ({}) trial {}: FAILED\n", chk.value("size", "?"),
                         chk.value("kind", "?"), chk.value("trial", 0));
      int n = 0;
      for (const auto& m : chk.value("mismatches", nlohmann::json::array())) {
        if (n++ >= 8) break;
        out += fmt::format("  rank {} output {}: {} bad, max abs err {:.4g}", m.value("rank", -1),
                           m.value("output", "?"), m.value("bad_count", 0),
                           m.value("max_abs_err", 0.0));
        // Off as a whole only (the relative-RMS bound, docs/tasks.md).
        if (m.value("bad_count", 0) == 0 && m.contains("rms_rel_err") &&
            m["rms_rel_err"].is_number()) {
          out += fmt::format(", relative RMS {:.5f}", m["rms_rel_err"].get<double>());
        }
        for (const auto& h : m.value("hints", nlohmann::json::array()))
          out += "; " + h.get<std::string>();
        out += "\n";
      }
      for (const auto& ch : chk.value("inputs_changed", nlohmann::json::array())) {
        out += fmt::format("  rank {} modified input {}\n", ch.value("rank", -1),
                           ch.value("input", "?"));
      }
    }
    out += fmt::format("checks    {} trials passed\n", c.value("passed_trials", 0));
  }
  if (d.contains("error")) {
    out += fmt::format("error     rank {} during {}: {}\n", d["error"].value("rank", -1),
                       Shown(d["error"], "phase", "?"), Shown(d["error"], "message"));
  }
  if (d.contains("timeout")) {
    std::string ranks;
    for (const auto& r : d["timeout"].value("hung_ranks", nlohmann::json::array()))
      ranks += " " + std::to_string(r.get<int>());
    out +=
        fmt::format("timeout   during {} (deadline {} s); hung ranks:{}\n",
                    d["timeout"].value("phase", "?"), d["timeout"].value("deadline_s", 0.0), ranks);
  }
  // One line per rank: which device ran it (and its clock and temperature
  // when the document has them per rank).
  const auto devices = d.value("devices", nlohmann::json::array());
  if (!devices.empty()) {
    const auto gpu = d.value("gpu", nlohmann::json::object());
    const auto clocks = gpu.value("sm_clock_mhz", nlohmann::json::array());
    const auto temps = gpu.value("temperature_c", nlohmann::json::array());
    for (size_t r = 0; r < devices.size(); ++r) {
      out += fmt::format("rank {:<4} device {:<3} {}", r, devices[r].get<int>(),
                         gpu.value("name", std::string("?")));
      if (clocks.size() == devices.size()) out += fmt::format("  {} MHz", clocks[r].dump());
      if (temps.size() == devices.size()) out += fmt::format("  {} C", temps[r].dump());
      out += "\n";
    }
  }
  const auto& timing = d.value("timing", nlohmann::json::array());
  if (!timing.empty()) {
    // The columns nccl-tests prints (size in bytes, count in elements, type,
    // algbw and busbw in GB/s, docs/methodology.md), then kforge's own.
    const std::string type = d.value("dtype", std::string("?"));
    const auto parsed = ParseDtype(type);
    const size_t elem = parsed.ok() ? DtypeSize(*parsed) : 0;
    out += fmt::format(
        "\n{:>10} {:>12} {:>12} {:>8} {:>12} {:>12} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6}\n", "size",
        "bytes", "count", "type", "baseline_us", "candidate_us", "algbw", "busbw", "base_bw",
        "speedup", "cv", "iters");
    for (const auto& t : timing) {
      const double bytes = t.value("bytes", 0.0);
      const std::string count =
          elem > 0 ? fmt::format("{:.0f}", bytes / static_cast<double>(elem)) : "?";
      out += fmt::format(
          "{:>10} {:>12.0f} {:>12} {:>8} {:>12.2f} {:>12.2f} {:>8.2f} {:>8.2f} {:>8.2f} {:>8.3f} "
          "{:>8.4f} {:>6}\n",
          t.value("size", "?"), bytes, count, type, t["baseline"].value("median_us", 0.0),
          t["candidate"].value("median_us", 0.0), t.value("algbw_gbps", 0.0),
          t.value("busbw_gbps", 0.0), t.value("baseline_busbw_gbps", 0.0), t.value("speedup", 0.0),
          t["candidate"].value("cv", 0.0), t["candidate"].value("iters", 0));
      if (const auto& e = t.value("expert", nlohmann::json()); e.is_object()) {
        out += fmt::format(
            "  expert: {:.2f} us ({:.3f}x the reference); the candidate runs at {:.3f}x the "
            "expert's speed\n",
            e.value("median_us", 0.0), e.value("over_baseline", 0.0), e.value("speedup", 0.0));
      }
      if (const auto& r = t.value("baseline_reused", nlohmann::json()); r.is_object()) {
        out += fmt::format("  baseline reused: timed by this evaluator {:.0f} s ago (reuse {})\n",
                           r.value("age_s", 0.0), r.value("uses", 0));
      }
      for (const auto& w : t.value("warnings", nlohmann::json::array()))
        out += "  warning: " + w.get<std::string>() + "\n";
    }
  }
  if (const auto& e = d.value("expert", nlohmann::json()); e.is_object()) {
    if (e.contains("none")) {
      out += "\nexpert    none: " + Shown(e, "none") + "\n";
    } else {
      out += "\nexpert    " + Shown(e, "kernel") + ": " + Shown(e, "technique") + "\n";
      if (e.contains("skipped")) out += "          not timed: " + Shown(e, "skipped") + "\n";
    }
  }
  if (const auto lines = ProfileLines(d.value("profile", nlohmann::json())); !lines.empty()) {
    out += "\n";
    for (const auto& l : lines) out += l + "\n";
  }
  out += fmt::format("\nstatus    {}: {}\n", Shown(d, "status", "?"), Shown(d, "message"));
  return out;
}

}  // namespace kforge::eval
